#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-man.py: the man pages say what the programs do (test man_pages).

  check-man.py --program PAGE PROGRAM ... --config PAGE GSYNCD OPERATIONS_MD

For each program page: every option the program's --help lists, and each
subcommand's (their -h,--help aside), is in the page, under OPTIONS or under
the subcommand's heading in COMMANDS, and the page lists no other option and
no other subcommand. For the config page: the keys of
`gsyncd --print-config` are the page's keys, and the rows of the "Keys"
table of docs/operations.md, whose defaults agree with the daemon's.

It reads the --help text and the roff on its own, not through gen-man.py,
so that a fault of the generator shows here; the config keys it reads as
the generator does (config_keys.py). Exit 1 naming each problem.
"""
import argparse
import re
import subprocess
import sys

import config_keys


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def help_scopes(program, path=()):
    """{"" or "tune load": {option names}} from --help, subcommands included."""
    block, options, subs = None, set(), []
    for line in run([program, *path, "--help"]).splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            block = line[:-1]
        elif line.startswith("  ") and line[2:3] not in ("", " "):
            first = line.split()[0]
            if block == "Subcommands":
                subs.append(first)
            elif block != "Positionals":
                options.update(first.split(","))
    if path:
        options -= {"-h", "--help"}
    scopes = {" ".join(path): options}
    for sub in subs:
        scopes.update(help_scopes(program, (*path, sub)))
    return scopes


def page_sections(page):
    """[(.SH heading, .SS heading or "", [lines])] of a roff page."""
    out = [("", "", [])]
    with open(page, encoding="ascii") as fh:
        for line in fh.read().splitlines():
            if line.startswith(".SH "):
                out.append((line[4:].strip('"'), "", []))
            elif line.startswith(".SS "):
                out.append((out[-1][0], line[4:].strip('"'), []))
            else:
                out[-1][2].append(line)
    return out


def tags(lines):
    """The tag line of each .TP item."""
    return [lines[i + 1] for i, l in enumerate(lines[:-1]) if l == ".TP"]


def page_scopes(page):
    scopes = {}
    for sh, ss, lines in page_sections(page):
        if sh == "OPTIONS" or (sh == "COMMANDS" and ss):
            names = scopes.setdefault(ss if sh == "COMMANDS" else "", set())
            for tag in tags(lines):
                found = re.findall(r"\\fB(\\-(?:\\-|[^\\])*)\\fR", tag)  # \fB\-\-a\-b\fR
                names.update(n.replace("\\-", "-") for n in found)
    return scopes


def check_program(page, program):
    want, have, problems = help_scopes(program), page_scopes(page), []
    for scope in sorted(set(want) | set(have)):
        where = f"{page}: " + (f"command '{scope}'" if scope else "OPTIONS")
        if scope not in have:
            problems.append(f"{where}: missing (the program has it)")
        elif scope not in want:
            problems.append(f"{where}: the program has no such command")
        else:
            problems += [f"{where}: {o} missing (the program has it)"
                         for o in sorted(want[scope] - have[scope])]
            problems += [f"{where}: {o} listed, but the program has no such option"
                         for o in sorted(have[scope] - want[scope])]
    return problems


def check_config(page, gsyncd, doc):
    want = {f"{sec}.{key}": value for sec, key, value in config_keys.daemon_keys(gsyncd)}
    problems = []
    have = set()
    for sh, ss, lines in page_sections(page):
        if sh == "KEYS" and ss:
            for tag in tags(lines):
                m = re.match(r"\\fB([\w\\-]+)\\fR = ", tag)
                if m:
                    have.add(ss.strip("[]") + "." + m.group(1).replace("\\-", "-"))
    problems += [f"{page}: key {k} missing (gsyncd knows it)" for k in sorted(set(want) - have)]
    problems += [f"{page}: key {k} listed, but gsyncd has no such key"
                 for k in sorted(have - set(want))]
    table = {k: row.default for k, row in config_keys.documented_keys(doc).items()}
    problems += [f"{doc}: key {k} has no row in the Keys table (gsyncd knows it)"
                 for k in sorted(set(want) - set(table))]
    problems += [f"{doc}: Keys table lists {k}, but gsyncd has no such key"
                 for k in sorted(set(table) - set(want))]
    problems += [f"{doc}: Keys table gives {k} the default {table[k]}, gsyncd {want[k]}"
                 for k in sorted(set(table) & set(want)) if table[k] not in (None, want[k])]
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", nargs=2, action="append", default=[], metavar=("PAGE", "EXE"))
    ap.add_argument("--config", nargs=3, metavar=("PAGE", "GSYNCD", "DOC"))
    args = ap.parse_args()
    problems = []
    for page, program in args.program:
        problems += check_program(page, program)
    if args.config:
        try:
            problems += check_config(*args.config)
        except RuntimeError as e:  # gsyncd --print-config failed
            problems.append(str(e))
    for p in problems:
        print(p)
    checked = len(args.program) + bool(args.config)
    print(f"{checked} pages checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
