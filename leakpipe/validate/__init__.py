"""Stage `validate`: stop bad data before any GPU hour is spent (docs/validation.md).

``leakpipe.validate.split_validation.validate_splits`` runs structural h5py checks, streams a
per-file summary of every split, validates it with a great-expectations suite built from the
`validate` params and compares the splits with each other; the result is a
``leakpipe.validate.validation_report.ValidationReport`` (JSON + HTML). This package module
stays light (the CLI imports it for every command); torch, pandas and great-expectations are
imported by the submodules that need them.
"""

from leakpipe.errors import DataError


class ValidationFailed(DataError):
    """At least one check failed; the message names the split, the check and the files."""


__all__ = ["ValidationFailed"]
