"""Class and group names as a user wrote them, in the one spelling leakpipe compares.

A manifest edited by hand or on another system spells one name several ways: ``leak`` for
``LEAK`` on some rows, ``Zürich`` composed (NFC, one code point for ``ü``) on one row and
decomposed (NFD, ``u`` and a combining diaeresis: what macOS file names and some editors
write) on another, a trailing space. Compared as bytes, each spelling is a class or a site of
its own: ``leak`` rows trained as not-a-leak, one site's recordings split across train and
test. So every reader of class and group names (manifests, class folders) passes them here:

- both: surrounding white space stripped, Unicode NFC (the composed form, which the standard
  makes canonical: NFC(NFD(x)) == NFC(x));
- classes: upper case as well (leakpipe's class names are upper-case words: ``LEAK``,
  ``NOLEAK``, ``NORMAL``), so that a class is matched without regard to case. Groups keep
  their case: ``Site-a`` and ``site-A`` may well be two sites.
"""

from __future__ import annotations

import unicodedata


def clean_name(text: str) -> str:
    """``text`` stripped of surrounding white space, in Unicode NFC."""
    return unicodedata.normalize("NFC", text.strip())


def class_name(text: str) -> str:
    """A class as leakpipe compares it: ``clean_name``, upper case (`` leak`` -> ``LEAK``)."""
    return unicodedata.normalize("NFC", clean_name(text).upper())   # upper case may decompose


def group_name(text: str) -> str:
    """A group (site / sensor) as leakpipe compares it: ``clean_name``, case kept."""
    return clean_name(text)
