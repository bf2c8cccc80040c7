"""Kafka's ``.properties`` files, read as ``java.util.Properties.load`` reads them (Kafka's ``Utils.loadProps``).

The broker reads ``server.properties`` from an ``InputStream``: bytes decoded as ISO-8859-1, other characters written
as ``\\uXXXX`` escapes.  The rules (``Properties.LineReader.readLine`` and ``Properties.load0``):

* a natural line ends at ``\\n``, ``\\r`` or ``\\r\\n``; leading spaces, tabs and form feeds are skipped, and a line
  left empty is ignored;
* a line whose first character (after that whitespace) is ``#`` or ``!`` is a comment, even if it ends in a
  backslash;
* a line that ends in an odd number of backslashes goes on on the next line: the backslash and the line break are
  dropped, and so is the next line's leading whitespace (a next line that is empty or blank ends the logical line);
* the key ends at the first unescaped ``=``, ``:``, space, tab or form feed; whitespace after it, then one ``=`` or
  ``:`` and the whitespace after that are skipped; what is left is the value (trailing whitespace kept);
* in keys and values ``\\t \\n \\r \\f`` are those characters, ``\\uXXXX`` a UTF-16 code unit (four hex digits,
  else "Malformed \\uxxxx encoding."), and a backslash before any other character is that character;
* a later key replaces an earlier one.
"""

from __future__ import annotations

import os

_BLANK = " \t\f"
_EOL = "\r\n"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A file ``Properties.load`` refuses (Java's IllegalArgumentException); a broker would not start."""


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """The properties of the file at ``path``, as a broker reads its ``server.properties``."""
    with open(path, "rb") as f:
        return load_properties(f.read().decode("latin-1"))


def load_properties(text: str) -> dict[str, str]:
    """``text`` (already decoded) read as ``Properties.load(Reader)`` reads it; in order, the last of a key kept."""
    props: dict[str, str] = {}
    for line in logical_lines(text):
        key, value = split_line(line)
        props.pop(key, None)  # a key set again goes last, as it now reads in the file
        props[key] = value
    return props


def logical_lines(text: str) -> list[str]:
    """The logical lines of ``text`` (``LineReader.readLine``): comments and blank lines dropped, continuations
    joined, the leading whitespace of each natural line skipped; escapes left as written."""
    lines: list[str] = []
    buf: list[str] = []
    skip_blank, continued, backslash = True, False, False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if skip_blank:
            if c in _BLANK or (not continued and c in _EOL):
                continue
            skip_blank, continued = False, False
        if not buf and c in "#!":  # a comment: up to the end of its natural line
            while i < n and text[i] not in _EOL:
                i += 1
            skip_blank = True
            continue
        if c not in _EOL:
            buf.append(c)
            backslash = not backslash if c == "\\" else False
            continue
        if not buf:  # an empty continuation line
            skip_blank = True
            continue
        if backslash:  # the line goes on: drop the backslash, and the \n of a \r\n
            buf.pop()
            skip_blank, continued, backslash = True, True, False
            if c == "\r" and i < n and text[i] == "\n":
                i += 1
            continue
        lines.append("".join(buf))
        buf = []
        skip_blank = True
    if buf:
        lines.append("".join(buf[:-1] if backslash else buf))
    return lines


def split_line(line: str) -> tuple[str, str]:
    """A logical line's key and value, unescaped (``Properties.load0``)."""
    key_end, value_start, has_separator, backslash = 0, len(line), False, False
    while key_end < len(line):
        c = line[key_end]
        if not backslash and (c in _SEPARATORS or c in _BLANK):
            value_start, has_separator = key_end + 1, c in _SEPARATORS
            break
        backslash = not backslash if c == "\\" else False
        key_end += 1
    while value_start < len(line):
        c = line[value_start]
        if c not in _BLANK:
            if has_separator or c not in _SEPARATORS:
                break
            has_separator = True
        value_start += 1
    return unescape(line[:key_end]), unescape(line[value_start:])


def unescape(s: str) -> str:
    """``Properties.loadConvert``: escapes resolved; ``\\uXXXX`` are UTF-16 code units (a surrogate pair written as
    two escapes makes one character)."""
    if "\\" not in s:
        return s
    units: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        i += 1
        if c != "\\":
            units.append(c)
            continue
        c = s[i] if i < n else ""  # a lone backslash at the end: readLine never leaves one
        i += 1
        if c == "u":
            digits = s[i:i + 4]
            if len(digits) < 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError("Malformed \\uxxxx encoding.")
            units.append(chr(int(digits, 16)))
            i += 4
        else:
            units.append(_ESCAPES.get(c, c))
    return _join_surrogates("".join(units))


def _join_surrogates(s: str) -> str:
    """Pairs of UTF-16 surrogates (from two ``\\u`` escapes) made one character, as Java's String holds them."""
    if not any("\ud800" <= c <= "\udfff" for c in s):
        return s
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def dump_properties(props: dict[str, str]) -> str:
    """``props`` written so that :func:`load_properties` reads them back (``Properties.store``'s escaping, but
    ``\\uXXXX`` only for what ISO-8859-1 cannot hold)."""
    return "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n" for k, v in props.items())


def _escape(s: str, key: bool) -> str:
    out = []
    for j, c in enumerate(s):
        if c == " " and (key or j == 0):
            out.append("\\ ")
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif ord(c) < 0x20 or ord(c) > 0xFF:
            out.extend(f"\\u{u:04x}" for u in _utf16_units(c))
        else:
            out.append(c)
    return "".join(out)


def _utf16_units(c: str) -> list[int]:
    b = c.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(b[k:k + 2], "little") for k in range(0, len(b), 2)]
