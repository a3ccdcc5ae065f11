"""Detector files as MLflow logged models: logging one (``log_pyfunc``: `leakpipe.serve` makes
it servable), registering it, fetching one by URI.

The registry: ship registers the detector it ships (of any kind) as a new version of one
registered model (``register_detector``) and points the alias ``candidate`` at it; `leakpipe
adapt` registers its field-adapted detector the same way with the alias ``adapted``; `leakpipe
promote` reads the versions behind ``candidate`` and ``champion`` (``alias_version``) and moves
``champion`` (``set_alias``). A version is fetched like any model:
``download_model("models:/<name>@<alias>")`` or ``models:/<name>/<version>``.

The registry explains itself: the registered model carries ``MODEL_DESCRIPTION`` (what the
detector is, what each alias means), each version the description its stage wrote (training
data, figures with their intervals).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakpipe.errors import DataError, LeakpipeError
from leakpipe.tracking.names import DETECTOR_SUFFIX, VERSION_SOURCE_TAGS
from leakpipe.tracking.runs import tracking_uri

LOGGED_MODEL_PREFIX = "models:/"
DESCRIPTION_CHARS = 5000          # MLflow's column for a model's or a version's description
MODEL_DESCRIPTION = (
    "leakpipe's acoustic leak detector for water pipes: one verdict per pipe recording. Each "
    "version is one detector file of a kind (tag leakpipe.detector_kind): cnn = a CNN (LeakCNN) "
    "scores log-mel segments of the recording and votes them into one leak score; logger_stats "
    "= the recording's level statistics (quiet moments, steadiness, per octave band) in a "
    "logistic regression; fused = the two stacked by a logistic regression on their recording "
    "logits. The score is compared with an operating point chosen on the val "
    "split. Each version is an MLflow pyfunc model that `leakpipe serve` and `leakpipe predict "
    "--model models:/...` take. Aliases: candidate = the newest detector `leakpipe ship` "
    "shipped (the kind grouped cross-validation selected, scored on the test split); champion "
    "= the version `leakpipe promote` let through (paired bootstrap over test recordings); "
    "adapted = the newest field-adapted detector of `leakpipe adapt` (pseudo-labelled field "
    "recordings; scored on val and the field check set, not on test). Each version's "
    "description is its model card: what it reads, its training data and its figures.")


class RegistryError(LeakpipeError):
    """The model registry refused a request (unknown model, store without a registry)."""


@dataclass(frozen=True)
class DetectorVersion:
    """One version of a registered detector model, as an alias finds it."""

    name: str
    version: str
    tags: dict[str, str] = field(default_factory=dict)
    description: str = ""      # ship's model card, adapt's summary ("" when none)

    @property
    def uri(self) -> str:
        """The version's own URI: it stays put when an alias moves on."""
        return f"models:/{self.name}/{self.version}"

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"


def log_pyfunc(name: str, *, code: Path, artifacts: Mapping[str, Path], signature: Any,
               input_example: Any, requirements: Sequence[str],
               code_paths: Sequence[Path] = ()) -> str:
    """Log an MLflow pyfunc model "from code" into the active run; its ``models:/`` URI.

    ``code`` is the file MLflow runs to build the model at load time (it calls ``set_model``);
    ``artifacts`` are files the model reads (``context.artifacts``); ``requirements`` are
    distribution names, pinned here to their installed versions rather than inferred (inference
    loads the model once more in a subprocess). The input example is logged as given and not
    run at logging time: the serve test runs the logged model.
    """
    import mlflow.pyfunc

    info = mlflow.pyfunc.log_model(
        name=name, python_model=str(code),
        artifacts={key: str(path) for key, path in artifacts.items()},
        signature=signature, input_example=input_example,
        pip_requirements=pinned(requirements), code_paths=[str(p) for p in code_paths])
    return f"{LOGGED_MODEL_PREFIX}{info.model_id}"


def pinned(names: Sequence[str]) -> list[str]:
    """``name==<installed version>`` for each distribution (a local build suffix dropped)."""
    from importlib.metadata import version

    return [f"{n}=={version(n).split('+')[0]}" for n in names]


def model_flavors(uri: str) -> set[str]:
    """The flavors of the MLflow model ``uri`` (``python_function`` if it can be served); a
    ``DataError`` naming the URI when there is no such model or it has no MLmodel file."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(tracking_uri())
    try:
        return set(mlflow.models.get_model_info(uri).flavors)
    except MlflowException as exc:
        raise DataError(f"{uri}: not an MLflow model here ({exc.message})") from None
    except OSError as exc:                   # a model folder without an MLmodel file
        raise DataError(f"{uri}: not an MLflow model ({exc})") from None


def is_model_uri(text: str) -> bool:
    return "://" in text or text.startswith(("models:/", "runs:/"))


def download_model(uri: str) -> Path:
    """A local detector file for an MLflow URI (``models:/<name>/<version>``,
    ``models:/<name>@<alias>``, ``models:/m-...``, ``runs:/<id>/path``): the artifact itself,
    or the one detector file inside a model folder.
    """
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(tracking_uri())
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    except MlflowException as exc:
        raise DataError(f"{uri}: cannot be loaded from MLflow ({exc.message})") from None
    if local.is_file():
        return local
    found = sorted(p for p in local.rglob(f"*{DETECTOR_SUFFIX}") if p.is_file())
    if len(found) != 1:
        raise DataError(f"{uri}: expected one leakpipe detector file (*{DETECTOR_SUFFIX}) in "
                        f"the model, found {len(found)}; log it with tracking.log_detector")
    return found[0]


# -- the model registry ---------------------------------------------------------------------------


def _registry() -> Any:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())   # the registry lives in the tracking store
    return mlflow.MlflowClient()


def _logged_model_id(uri: str) -> str:
    """``models:/m-...`` (what ``log_detector`` returns) -> the logged model's id."""
    model_id = uri.removeprefix(LOGGED_MODEL_PREFIX)
    if model_id == uri or not model_id or "/" in model_id or "@" in model_id:
        raise ValueError(f"{uri}: not a logged model URI (models:/<model id>)")
    return model_id


def _ensure_registered_model(client: Any, name: str) -> None:
    """Create registered model ``name`` with ``MODEL_DESCRIPTION`` unless it exists; two
    evaluate runs at once (queued DVC experiments) may both try, and the second one's attempt
    is not an error. A model without a description (made before leakpipe wrote one) gets it; a
    description someone wrote is kept."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name, description=MODEL_DESCRIPTION)
        return
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    if not client.get_registered_model(name).description:
        client.update_registered_model(name, description=MODEL_DESCRIPTION)


def fitted_description(text: str, whole: str = "") -> str:
    """``text`` as a registered version's description: itself when it fits MLflow's
    ``DESCRIPTION_CHARS``; else a first paragraph saying where the whole text is (``whole``,
    e.g. the run artifact of the card), then as many whole lines of ``text`` as fit, then how
    many characters are left out. Never cut mid-line, never silently."""
    if len(text) <= DESCRIPTION_CHARS:
        return text
    where = f" The whole card: `{whole}`." if whole else ""
    head = (f"_This card is {len(text):,} characters, over the registry's "
            f"{DESCRIPTION_CHARS:,}: below, its beginning.{where}_\n\n")
    lines, size = [], len(head)
    tail_room = 120                                    # the closing line
    for line in text.splitlines(keepends=True):
        if size + len(line) > DESCRIPTION_CHARS - tail_room:
            break
        lines.append(line)
        size += len(line)
    left = len(text) - sum(map(len, lines))
    tail = f"\n_... {left:,} more characters in the whole card{f' (`{whole}`)' if whole else ''}._"
    return (head + "".join(lines) + tail)[:DESCRIPTION_CHARS]


def register_detector(uri: str, name: str, tags: Mapping[str, str] | None = None,
                      description: str = "", whole: str = "") -> str:
    """Register the logged detector ``uri`` (from ``log_detector``) as a new version of the
    registered model ``name`` (created when absent); returns the version number.

    The version carries ``tags`` plus the git commit, DVC experiment and unvalidated tags of
    the run that logged the model, so a version says where it came from without its run, and
    ``description`` (what it was trained on, its figures), whole when it fits MLflow's 5000
    characters, else its beginning with where the whole one is (``whole``:
    ``fitted_description``).
    """
    from mlflow.exceptions import MlflowException

    model_id = _logged_model_id(uri)
    client = _registry()
    try:
        run_id = client.get_logged_model(model_id).source_run_id
        source = client.get_run(run_id).data.tags if run_id else {}
        version_tags = {k: source[k] for k in VERSION_SOURCE_TAGS if k in source}
        _ensure_registered_model(client, name)
        version = client.create_model_version(name, source=uri, run_id=run_id,
                                              tags={**version_tags, **(tags or {})},
                                              description=fitted_description(
                                                  description, whole) or None,
                                              model_id=model_id)
    except MlflowException as exc:
        raise RegistryError(f"{name}: cannot register {uri} in the MLflow model registry "
                            f"({exc.message})") from None
    return str(version.version)


def alias_version(name: str, alias: str) -> DetectorVersion | None:
    """The version of registered model ``name`` that ``alias`` points at; None when the model
    or the alias does not exist (yet)."""
    from mlflow.exceptions import MlflowException

    client = _registry()
    try:
        model = client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise RegistryError(f"{name}: cannot read the MLflow model registry "
                            f"({exc.message})") from None
    version = (model.aliases or {}).get(alias)
    if version is None:
        return None
    found = client.get_model_version(name, str(version))
    return DetectorVersion(name=name, version=str(found.version), tags=dict(found.tags or {}),
                           description=found.description or "")


def set_alias(name: str, alias: str, version: str) -> None:
    """Point ``alias`` of registered model ``name`` at ``version`` (moved if it pointed
    elsewhere: an alias names one version at a time)."""
    from mlflow.exceptions import MlflowException

    try:
        _registry().set_registered_model_alias(name, alias, str(version))
    except MlflowException as exc:
        raise RegistryError(f"{name}: cannot set alias {alias} to version {version} "
                            f"({exc.message})") from None


def set_version_tags(name: str, version: str, tags: Mapping[str, str]) -> None:
    """Add ``tags`` to one version of registered model ``name``."""
    client = _registry()
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, str(value))
