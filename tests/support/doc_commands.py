"""The shell commands and HCL the README and the docs show, extracted so that tests run them.

A page's fenced `sh`, `bash` and `console` blocks are split into statements (continuation lines
joined, comments dropped; in a `console` block, the `$ ` lines, each with the output shown under
it). `tests/test_docs_commands.py` runs the ones a laptop can (runonce, curl against a local
`runonce serve`, make), and `tests/deploy/test_docs_deploy.py` the deployment ones (the deploy
scripts and gcloud against the fake Google APIs, and `terraform fmt` on every `hcl` block).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGS = ("sh", "bash", "console", "shell")
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.S | re.M,
)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def doc_pages() -> list[Path]:
    """Every page a user reads as documentation: the README, the site, the Terraform module's."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "terraform" / "README.md"]
    return pages + sorted((REPO / "terraform" / "examples").rglob("*.md"))


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str


def blocks(langs: tuple[str, ...]) -> list[Block]:
    """The fenced blocks of these languages on every page, dedented (a list item indents them)."""
    found = []
    for path in doc_pages():
        text = path.read_text()
        for match in FENCE.finditer(text):
            if match.group("lang") not in langs:
                continue
            indent = len(match.group("indent"))
            body = "".join(
                line[indent:] if line[:indent].isspace() else line for line in match.group("body").splitlines(True)
            )
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(str(path.relative_to(REPO)), line, match.group("lang"), body))
    return found


@dataclass
class Statement:
    """One command as a user types it, with where it is shown and the output shown under it."""

    page: str
    line: int
    text: str
    comment: str = ""
    output: list[str] = field(default_factory=list)

    @property
    def words(self) -> list[str]:
        """The words after leading `NAME=value` assignments, unquoted."""
        rest = self.text
        while ASSIGNMENT.match(rest):
            rest = rest[_word_end(rest, 0) :].lstrip()
        try:
            return shlex.split(rest)
        except ValueError:
            return rest.split()

    @property
    def command(self) -> str:
        """The program: the first word after the assignments ("" for assignments alone)."""
        words = self.words
        if not words:
            return ""
        return "runonce" if words[0].endswith("/runonce") else words[0]

    @property
    def programs(self) -> list[str]:
        """Every program the statement runs: its command and each `$(…)`'s."""
        inner = [m.group(1) for m in re.finditer(r"\$\(\s*([^\s)]+)", self.text)]
        return [name for name in [self.command, *inner] if name]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _word_end(text: str, start: int) -> int:
    """Where the shell word at `start` ends: quotes and `$(…)` (nested) belong to it."""
    quote, depth, index = "", 0, start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif text.startswith("$(", index):
            depth += 1
            index += 1
        elif char == ")" and depth:
            depth -= 1
        elif char.isspace() and not depth:
            return index
        index += 1
    return index


def strip_comment(line: str) -> tuple[str, str]:
    """`cmd 'a # b' # note` -> ("cmd 'a # b'", "note"): a `#` outside quotes after a blank or at
    the start begins a comment."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip(), line[index + 1 :].strip()
    return line.rstrip(), ""


def statements(block: Block) -> list[Statement]:
    if block.lang == "console":
        return _console(block)
    found: list[Statement] = []
    pending, comment, start = "", "", 0
    for number, raw in enumerate(block.text.splitlines(), start=block.line + 1):
        code, note = strip_comment(raw)
        if not pending:
            start = number
        comment = f"{comment} {note}".strip() if note else comment
        if code.endswith("\\"):
            pending += code[:-1].rstrip() + " "
            continue
        text = (pending + code.strip()).strip()
        pending = ""
        if text:
            found.append(Statement(block.page, start, text, comment))
        comment = ""
    return found


def _console(block: Block) -> list[Statement]:
    found: list[Statement] = []
    lines = block.text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.startswith("$ "):
            if found:
                found[-1].output.append(line)
            continue
        text = line[2:]
        while text.rstrip().endswith("\\") and index < len(lines):
            text = text.rstrip()[:-1].rstrip() + " " + lines[index].strip()
            index += 1
        code, note = strip_comment(text)
        found.append(Statement(block.page, block.line + index, code.strip(), note))
    return found


def shell_statements() -> list[Statement]:
    return [statement for block in blocks(SHELL_LANGS) for statement in statements(block)]


INLINE = re.compile(r"`((?:\.venv/bin/)?runonce [^`]*--[^`]*)`")


def inline_runonce_commands() -> list[Statement]:
    """`runonce …` in a page's text, when it shows options (a command's name alone is not a command)."""
    found = []
    for path in doc_pages():
        text = re.sub(r"^(```|~~~).*?^\1", lambda m: "\n" * m.group(0).count("\n"), path.read_text(), flags=re.S | re.M)
        for match in INLINE.finditer(text):
            if "--help" in match.group(1):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.append(Statement(str(path.relative_to(REPO)), line, match.group(1)))
    return found
