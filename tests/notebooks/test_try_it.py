"""Every `companion run|sweep` command printed in the book ("Try it" sections, the Reproduce page) names a
real notebook and real parameters of the right types, so a reader can paste it as it is."""

import re
import shlex

import pytest

from companion import notebooks as nbs
from companion.cli import build_parser
from companion.run.grid import expand_grid, parse_grid
from companion.run.inputs import coerce_parameters, load_param_file

from _util import ROOT

PAGES = sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "notebooks").rglob("*.md"))
COMMANDS = [
    (page, line.strip())
    for page in PAGES
    for line in page.read_text().splitlines()
    if re.match(r"^\s*companion (run|sweep) ", line)
]


def test_every_notebook_prints_a_command():
    pages = {p for p, _ in COMMANDS}
    for name in nbs.all_notebooks():
        assert nbs.resolve(name) in pages, f"{name} has no 'companion run/sweep' command"


@pytest.mark.parametrize("page,command", COMMANDS, ids=[f"{p.stem}:{c[:40]}" for p, c in COMMANDS])
def test_printed_command_is_valid(page, command):
    argv = shlex.split(command.split("#", 1)[0])[1:]
    args = build_parser().parse_args(argv)
    name = nbs.name_of(nbs.resolve(args.notebook))
    specs = nbs.parameters(name)
    text = dict(args.param or [])
    if args.command == "run":
        typed = {}
        for f in args.file or []:
            if (ROOT / f).is_file():
                typed.update(load_param_file(ROOT / f))
        coerce_parameters(name, specs, typed, text)
    else:
        points = expand_grid(name, parse_grid(args.grid or []), fixed_text=text)
        assert points
