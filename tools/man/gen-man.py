#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gen-man.py: a man page from its prose source and the program itself, so
that the page cannot drift from the program.

  gen-man.py --source gsyncd.8.md --program build/daemon/gsyncd --output gsyncd.8
  gen-man.py --source gsyncd.toml.5.md --config-of build/daemon/gsyncd \\
             --keys-doc docs/operations.md --output gsyncd.toml.5

A program's page: the SYNOPSIS from its "Usage:" line, the OPTIONS from its
--help (CLI11's, cli11_help.py), the COMMANDS from each subcommand's --help.
The config page: the KEYS from `gsyncd --config /dev/null --print-config`
(every key the daemon knows, at its default: the daemon's one table of keys,
daemon/config/config_rules.cc), each described by its row of the "Keys"
table of docs/operations.md. The prose is the source's (roff.py says its
format). tools/man/check-man.py (test man_pages) holds the pages to the
programs.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys

import cli11_help
import config_keys
import roff

MANUALS = {"1": "User Commands", "5": "File Formats", "8": "System Administration"}


def help_text(text):
    """A description from --help: plain text, its option names with minus signs."""
    text = roff.escape(text)
    return re.sub(r"(?<![\w-])(--?[A-Za-z][\w-]*)", lambda m: m.group(1).replace("-", "\\-"),
                  text)


def note(check):
    """CLI11's check text as a reader says it: "INT in [1 - 64]" -> "1 to 64"."""
    m = re.match(r"^[A-Z]+ in \[(\S+) - (\S+)\]$", check)
    if m:
        return f"{m.group(1)} to {m.group(2)}"
    m = re.match(r"^\{(.*)\}$", check)
    return "one of " + m.group(1).replace(",", ", ") if m else check


def option_item(entry, positional=False):
    value, notes = cli11_help.describe_opts(entry.opts)
    if positional:
        tag = "\\fI" + roff.escape(entry.names[0]) + "\\fR"
    else:
        tag = ", ".join(roff.literal(n) for n in entry.names)
        tag += " \\fI" + roff.escape(value) + "\\fR" if value else ""
    notes = roff.escape("; ".join(note(n) for n in notes))
    if notes:
        # "the page (HTML); required", "size multiplier (1 to 1024)"
        notes = "; " + notes if entry.text.endswith(")") else " (" + notes + ")"
    text = help_text(entry.text) + notes
    return [".TP", roff.line(tag), roff.line(text)]


def synopsis(name, cmd, drop_options):
    """\\fBgsyncctl tune load\\fR [\\fIOPTIONS\\fR] \\fIfile\\fR ..."""
    words = cmd.usage.split()[len(cmd.path):]
    if drop_options:
        words = [w for w in words if w != "[OPTIONS]"]
    rest = [re.sub(r"([A-Za-z_][\w-]*)", r"\\fI\1\\fR", roff.escape(w)) for w in words]
    return " ".join([roff.literal(" ".join([name] + cmd.path))] + rest)


def own_options(cmd):
    """A subcommand's options but -h,--help, which every one has."""
    return [e for e in cmd.options if not cmd.path or "--help" not in e.names]


def commands(name, cmd):
    """The COMMANDS section's lines: each subcommand, depth first."""
    out = []
    for child in cmd.children:
        opts = own_options(child)
        out += [".SS \"" + roff.escape(" ".join(child.path)) + "\"",
                roff.line(synopsis(name, child, not opts)),
                ".PP", roff.line(help_text(child.description))]
        for e in child.positionals:
            out += option_item(e, positional=True)
        for e in opts:
            out += option_item(e)
        out += commands(name, child)
    return out


def program_parts(name, program):
    cmd = cli11_help.read_program(program)
    parts = {"SYNOPSIS": [synopsis(name, cmd, False)], "OPTIONS": []}
    for e in cmd.positionals:
        parts["OPTIONS"] += option_item(e, positional=True)
    for e in cmd.options:
        parts["OPTIONS"] += option_item(e)
    if cmd.children:
        parts["COMMANDS"] = commands(name, cmd)
    return parts


def config_parts(gsyncd, keys_doc):
    docs = config_keys.documented_keys(keys_doc)
    lines, section = [], None
    for sec, key, value in config_keys.daemon_keys(gsyncd):
        if sec != section:
            section = sec
            lines.append(".SS \"[" + roff.escape(sec) + "]\"")
        row = docs.get(f"{sec}.{key}")
        meaning = row.meaning if row else None
        if meaning is None:
            print(f"gen-man.py: {sec}.{key} has no row in {keys_doc}", file=sys.stderr)
            meaning = "(No row in the Keys table of docs/operations.md.)"
        # The table's pointers within operations.md, said from outside it.
        meaning = re.sub(r'"([^"]+)" below', r'operations.md, "\1"', meaning)
        lines += [".TP", roff.line(roff.literal(key) + " = " + roff.escape(value)),
                  roff.line(roff.inline(meaning))]
    return {"KEYS": lines}


def render(source, parts, version):
    name, section, summary, sections = roff.read_source(source)
    missing = set(parts) - {h for h, _ in sections}
    if missing:
        raise ValueError(f"{source}: no '## {sorted(missing)[0]}' section for the generated part")
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    date = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime(
        "%Y-%m-%d") if epoch else ""
    out = [f'.\\" Generated by tools/man/gen-man.py from tools/man/{os.path.basename(source)}'
           " and the program; edit those.",
           f'.TH "{roff.escape(name.upper())}" "{section}" "{date}" "gsync {version}" '
           f'"{MANUALS[section]}"',
           ".nh", ".ad l", ".SH NAME", f"{roff.escape(name)} \\- {roff.escape(summary)}"]
    for heading, lines in sections:
        out.append(f'.SH "{heading}"')
        generated = parts.get(heading, [])
        if heading == "SYNOPSIS":
            out += generated + roff.body(lines)
        else:
            out += roff.body(lines) + generated
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--version", default="")
    ap.add_argument("--program", help="the program whose --help gives the options")
    ap.add_argument("--config-of", help="gsyncd, whose --print-config gives the keys")
    ap.add_argument("--keys-doc", help="docs/operations.md, whose Keys table describes them")
    args = ap.parse_args()
    if bool(args.program) == bool(args.config_of):
        ap.error("give one of --program and --config-of")
    try:
        name = roff.read_source(args.source)[0]
        parts = (program_parts(name, args.program) if args.program else
                 config_parts(args.config_of, args.keys_doc))
        page = render(args.source, parts, args.version)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"gen-man.py: {e}", file=sys.stderr)
        return 1
    with open(args.output, "w", encoding="ascii") as fh:
        fh.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
