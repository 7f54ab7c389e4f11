"""Every `cagtool ...` command the README and docs/ show exists, prints its --help, and names only
options that command has: the docs cannot drift from the CLI unnoticed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Inline code spans that start with the command (prose says "cagtool records ...": not a command).
_INLINE = re.compile(r"`(cagtool (?:[^`]+))`")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _command_texts(path: Path) -> list[tuple[str, str]]:
    """(where, command text) for each `cagtool ...` in fenced code blocks and inline code spans."""
    found: list[tuple[str, str]] = []
    in_fence = False
    pending = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        where = f"{path.relative_to(ROOT)}:{number}"
        if in_fence:
            line = pending + line
            if line.rstrip().endswith("\\"):  # a shell continuation: one command over several lines
                pending = line.rstrip()[:-1] + " "
                continue
            pending = ""
            for segment in re.split(r"&&|\|\|?|;", line):
                segment = segment.strip().removeprefix("$ ")
                if segment.startswith("cagtool "):
                    found.append((where, segment))
        else:
            found.extend((where, match) for match in _INLINE.findall(line))
    return found


def _tokens(text: str) -> list[str]:
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose-like code: split on spaces
        tokens = text.split()
    # Placeholders: `[RUN]`, `[--rank N]`, `NODE_RUN...`
    return [t.strip("[]") for t in tokens if t.strip("[]") and t != "..."]


def _option_map(command) -> dict[str, object]:
    return {name: param for param in command.params for name in (*param.opts, *param.secondary_opts)}


def _check(where: str, text: str, root) -> tuple[str, ...] | None:
    """The subcommand path the text names (checked), or None for the root's own options."""
    tokens = _tokens(text)[1:]
    root_options = _option_map(root)
    while tokens and tokens[0].startswith("-"):
        assert tokens[0] in root_options, f"{where}: `{text}`: cagtool has no option {tokens[0]}"
        tokens.pop(0)
    if not tokens:
        return None
    command = root.get_command(None, tokens[0])
    assert command is not None, f"{where}: `{text}`: no command {tokens[0]!r}"
    names = [tokens.pop(0)]
    if hasattr(command, "commands") and tokens and not tokens[0].startswith("-"):
        sub = command.get_command(None, tokens[0])
        assert sub is not None, f"{where}: `{text}`: no command {' '.join(names)} {tokens[0]!r}"
        names.append(tokens.pop(0))
        command = sub
    options = _option_map(command)
    stop_at_positional = names == ["run"]  # after SCRIPT (or -m MODULE, --), the script's own arguments
    while tokens:
        token = tokens.pop(0)
        if token == "--" or (stop_at_positional and not token.startswith("-")):
            break
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d.*", token):
            continue
        name = token.split("=", 1)[0]
        assert name in options, f"{where}: `{text}`: `cagtool {' '.join(names)}` has no option {name}"
        param = options[name]
        if "=" not in token and not getattr(param, "is_flag", False) and not getattr(param, "count", False) and tokens:
            tokens.pop(0)  # the option's value
            if stop_at_positional and name in ("-m", "--module"):
                break  # the module's own arguments follow
    return tuple(names)


def test_the_docs_show_commands():
    texts = [t for path in DOCS for t in _command_texts(path)]
    assert len(texts) > 40  # the extraction still finds what README and docs/ show


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_command_in_the_docs_exists_with_the_options_it_names(path, capsys):
    from cagtool import cli

    root = cli.typer.main.get_command(cli.app)
    shown = {names for where, text in _command_texts(path) if (names := _check(where, text, root)) is not None}
    for names in sorted(shown):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([*names, "--help"])
        assert exit_info.value.code == 0, names
        assert capsys.readouterr().out.startswith(f"Usage: cagtool {' '.join(names)}"), names
