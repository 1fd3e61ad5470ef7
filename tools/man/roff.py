# SPDX-License-Identifier: Apache-2.0
"""The prose source of a man page (tools/man/NAME.SECTION.md) and its roff.

The source, a small subset of Markdown:

    gsyncd(8) - per-host gradient aggregation daemon    <- first line: NAME

    ## DESCRIPTION                                       <- a section
    Paragraphs, separated by blank lines. `code` is bold (what one types),
    *word* italic, **word** bold; gsyncctl(1) names a page.

    - `/etc/gsync/gsyncd.toml`                           <- a tagged item
      what it is, on lines indented by two spaces

        gsyncd --print-config                            <- four spaces: verbatim

gen-man.py appends the generated parts (options, commands, keys) to the
sections of those names, so the source decides where they go.
"""
import re

CODE = re.compile(r"`([^`]*)`")
PAGE_REF = re.compile(r"\b([a-z][a-z0-9_.-]*)\(([1-8])\)")
LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")


def escape(text):
    """Plain text for roff: backslashes, and non-ASCII as \\[uXXXX]
    (groff and mandoc both read it; the page stays ASCII)."""
    text = text.replace("\\", "\\e")
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)


def literal(text):
    """Text to type as it is: bold, its hyphens real minus signs."""
    return "\\fB" + escape(text).replace("-", "\\-") + "\\fR"


def _prose(text):
    text = escape(LINK.sub(r"\1", text))
    text = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", text)
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\\fI\1\\fR", text)
    return PAGE_REF.sub(r"\\fB\1\\fR(\2)", text)


def inline(text):
    """One line of source markup as roff text."""
    parts = CODE.split(text)
    return "".join(literal(p) if i % 2 else _prose(p) for i, p in enumerate(parts))


def line(text):
    """A text line that roff does not take for a request."""
    return "\\&" + text if text.startswith((".", "'")) else text


def _blocks(lines):
    """['p', text] paragraphs, ['tp', tag, text] items, ['pre', lines]."""
    out, cur = [], None  # cur: the block the next line may continue
    for raw in lines + [""]:
        pre = cur is not None and cur[0] == "pre"
        if raw.startswith("    ") and (cur is None or pre):
            if not pre:
                cur = ["pre", []]
                out.append(cur)
            cur[1].append(raw[4:])
        elif not raw.strip():
            if pre:
                cur[1].append("")  # a blank line inside verbatim text
            else:
                cur = None
        elif raw.startswith("- "):
            cur = ["tp", raw[2:].strip(), ""]
            out.append(cur)
        elif cur is not None and cur[0] == "tp" and raw.startswith("  "):
            cur[2] = (cur[2] + " " + raw.strip()).strip()
        elif cur is not None and cur[0] == "p":
            cur[1] += " " + raw.strip()
        else:
            cur = ["p", raw.strip()]
            out.append(cur)
    return out


def body(lines):
    """roff lines of a section's source lines."""
    out = []
    for block in _blocks(lines):
        if block[0] == "p":
            out += [".PP", line(inline(block[1]))]
        elif block[0] == "tp":
            out += [".TP", line(inline(block[1])), line(inline(block[2]))]
        else:
            while block[1] and not block[1][-1].strip():
                block[1].pop()
            out += [".PP", ".RS 4", ".nf"] + [line(escape(l)) for l in block[1]] + [".fi", ".RE"]
    return out


def read_source(path):
    """(name, section, summary, [(heading, [lines])]) of a source file."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    m = re.match(r"^(\S+)\(([1-8])\) - (.+)$", lines[0])
    if not m:
        raise ValueError(f"{path}:1: expected 'name(N) - summary'")
    sections = []
    for raw in lines[1:]:
        if raw.startswith("## "):
            sections.append((raw[3:].strip(), []))
        elif sections:
            sections[-1][1].append(raw)
        elif raw.strip():
            raise ValueError(f"{path}: text before the first '## SECTION': {raw!r}")
    return m.group(1), m.group(2), m.group(3), sections
