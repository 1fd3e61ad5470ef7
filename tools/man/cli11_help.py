# SPDX-License-Identifier: Apache-2.0
"""A program's options as its CLI11 `--help` prints them (CLI11 2.x,
Formatter::make_help): a description, a "Usage:" line, then blocks headed
"Options:", "Positionals:", "Subcommands:" (or an option group's name).

Each entry is "  NAME[ OPTS]" padded to column 30 and its description; a
name of 28 characters or more puts the description on the next line, at
column 30 (CLI11's detail::format_help). Used by gen-man.py; the test
(check-man.py) reads the names on its own.
"""
import re
import subprocess
from dataclasses import dataclass, field

COLUMN = 30  # CLI11's default column_width


@dataclass
class Entry:
    names: list   # ["-c", "--config"]; a positional or a command: ["sockets"]
    opts: str     # "TEXT=/run/gsync/x (Env:X)", "INT:INT in [1 - 64]", ""
    text: str     # the description


@dataclass
class Command:
    path: list             # [] for the program, ["tune", "load"] for a subcommand
    description: str
    usage: str             # after the program's own name: "tune load [OPTIONS] file"
    options: list = field(default_factory=list)
    positionals: list = field(default_factory=list)
    subcommands: list = field(default_factory=list)  # an Entry per "Subcommands:" line
    children: list = field(default_factory=list)     # their Commands, in that order


def run_help(program, path):
    """`program PATH... --help`'s text; an error naming the command if it fails."""
    argv = [program] + path + ["--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _entries(lines):
    """(block name, first line, continuation lines) of each entry."""
    block, out = None, []
    for line in lines:
        if not line.strip():
            continue
        if not line.startswith(" ") and line.endswith(":"):
            block = line[:-1]
        elif line.startswith("  ") and line[2] != " ":
            out.append([block, line, []])
        elif out and line.startswith(" " * COLUMN):
            out[-1][2].append(line[COLUMN:].strip())
    return out


def _split(line, continued):
    """(head, description) of an entry's first line."""
    body = line.rstrip()
    # A long head has its description on the next line; a short one at
    # column 30, after a space at 29. A line followed by a continuation is
    # taken for a long head (these programs have no two-line descriptions).
    if continued and len(body) >= COLUMN - 2:
        return body.strip(), ""
    if len(body) > COLUMN and body[COLUMN - 1] == " ":
        return body[:COLUMN].strip(), body[COLUMN:].strip()
    return body.strip(), ""


def parse_help(text, path):
    lines = text.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("Usage:"))
    usage = lines[at].split(None, 2)[2] if len(lines[at].split()) > 2 else ""
    # The usage line names the program by argv[0]; drop it and the path.
    words = usage.split()[len(path):]
    cmd = Command(path, " ".join(l.strip() for l in lines[:at] if l.strip()),
                  " ".join(path + words))
    for block, first, rest in _entries(lines[at + 1:]):
        head, said = _split(first, bool(rest))
        name, _, opts = head.partition(" ")
        entry = Entry(name.split(","), opts.strip(), " ".join([said] + rest).strip())
        if block == "Subcommands":
            cmd.subcommands.append(entry)
        elif block == "Positionals":
            cmd.positionals.append(entry)
        else:
            cmd.options.append(entry)
    return cmd


def read_program(program, path=None):
    """The program's command tree: its own help and each subcommand's."""
    path = path or []
    cmd = parse_help(run_help(program, path), path)
    for sub in cmd.subcommands:
        cmd.children.append(read_program(program, path + [sub.names[0]]))
    return cmd


OPTS = re.compile(r"^(?P<type>[A-Z]+)(?::(?P<check>.*?))?(?:=(?P<default>\S+))?$")


def describe_opts(opts):
    """(value name, notes) of an entry's OPTS: "INT:INT in [1 - 64]=3" ->
    ("INT", ["INT in [1 - 64]", "default: 3"])."""
    notes, rest = [], opts
    env = re.search(r"\s*\(Env:(\w+)\)", rest)
    if env:
        rest = rest.replace(env.group(0), "")
    required = rest.endswith(" REQUIRED") or rest == "REQUIRED"
    rest = re.sub(r"\s*REQUIRED$", "", rest)
    many = rest.endswith(" ...")
    rest = re.sub(r"\s*\.\.\.$", "", rest)
    m = OPTS.match(rest)
    if not m:
        return rest, notes
    if m.group("check"):
        notes.append(m.group("check"))
    if m.group("default"):
        notes.append("default: " + m.group("default"))
    if env:
        notes.append("environment: " + env.group(1))
    if required:
        notes.append("required")
    if many:
        notes.append("may be repeated")
    return m.group("type"), notes
