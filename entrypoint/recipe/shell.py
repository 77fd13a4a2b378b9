"""Shell text as bash reads it into simple commands: words, quotes, comments, continuations, operators.

`import` reads ms-swift example scripts and users' run scripts. Python's shlex does not read them as bash
does: it starts a comment at a `#` inside a word (`--dataset AI-MO/NuminaMath-TIR#1000` loses `#1000`),
keeps `\\<newline>` as a newline character, and has no notion of where a command ends. bashlex (PyPI)
refuses comments and blank lines (idank/bashlex#1, #2), which every script has. So this module follows
the rules of bash's manual ("Shell Syntax": quoting, comments; "Simple Commands"; "Redirections") for
the subset such scripts use, and refuses what it does not read (control flow, command substitution,
here-documents) by naming it:

- a word ends at unquoted blanks; a newline or one of `; & | && ||` ends the command;
- `\\<newline>` outside single quotes is removed (a continuation); `\\x` quotes x;
- '...' is literal, newlines included; "..." keeps `$` expansion and the escapes \\$ \\` \\" \\\\;
  $'...' reads \\n, \\t and friends;
- `#` at the start of a word starts a comment up to the end of the line, which then ends the command:
  a `# --flag \\` line inside a `\\`-continued command ends the command there, as bash does, and the
  lines after it are separate commands;
- `>file`, `2>&1`, `&>file`, `<file` are redirections: neither they nor their targets are words;
- $NAME, ${NAME}, ${NAME:-default} are kept as `Var` parts for the caller to expand with the script's own
  assignments (an unknown one stays as written).

Commented-out commands (ms-swift's examples keep the `swift rollout` command in comments) are read too:
each block of whole-line comments outside a command is read again without its `#`s, and its commands are
marked `commented`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

BLANKS = " \t\r"
CONTROL_WORDS = {
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "for",
    "while",
    "until",
    "do",
    "done",
    "case",
    "esac",
    "function",
    "select",
    "{",
    "}",
    "[[",
    "]]",
}
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ANSI_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "e": "\x1b",
    "E": "\x1b",
}


class ShellError(ValueError):
    """Text bash would not read as a command (an unclosed quote), with its line."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line, self.reason = line, message


@dataclasses.dataclass(frozen=True)
class Var:
    """A parameter expansion: $NAME, ${NAME}, ${NAME:-default} (`raw` is the text as written)."""

    name: str
    raw: str
    default: str | None = None  # ${NAME:-default} / ${NAME-default}


Part = str | Var


@dataclasses.dataclass
class Word:
    parts: list[Part] = dataclasses.field(default_factory=list)
    quoted: bool = False  # some part was quoted: `"if"` is not a keyword, `""` is an empty word

    def expand(self, variables: Mapping[str, str]) -> str:
        """The word with the script's assignments expanded; an unknown variable stays as written."""
        out = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
            elif p.name in variables:
                out.append(variables[p.name])
            else:
                out.append(p.default if p.default is not None else p.raw)
        return "".join(out)

    def literal(self) -> str:
        return self.expand({})


@dataclasses.dataclass
class Command:
    """One simple command: its words, the line it starts on, and what the reader noticed."""

    words: list[Word]
    line: int
    commented: bool = False  # read from a block of `#` lines
    control: str = ""  # shell syntax beyond a simple command (a keyword, a subshell, a substitution): what
    cut: tuple[int, str] | None = None  # a comment line inside its `\` continuation ended it: (line, text)

    def expand(self, variables: Mapping[str, str]) -> list[str]:
        return [w.expand(variables) for w in self.words]


class _Reader:
    """One pass over the text; `commands` holds what it read, in order."""

    def __init__(self, text: str, first_line: int):
        self.text, self.i, self.line = text, 0, first_line
        self.commands: list[Command] = []
        self.comment_lines: list[tuple[int, str]] = []  # whole-line comments outside a command
        self.words: list[Word] = []
        self.word: Word | None = None
        self.start = first_line
        self.control = ""
        self.cut: tuple[int, str] | None = None
        self.redirect = False  # the next word is a redirection's target

    # words and commands ------------------------------------------------------------------------------------

    def _add(self, part: Part, quoted: bool = False) -> None:
        if self.word is None:
            self.word = Word()
            if not self.words:
                self.start = self.line
        if quoted:
            self.word.quoted = True
        if isinstance(part, str) and self.word.parts and isinstance(self.word.parts[-1], str):
            self.word.parts[-1] += part
        else:
            self.word.parts.append(part)

    def _end_word(self) -> None:
        if self.word is not None:
            if self.redirect:
                self.redirect = False
            else:
                if not self.words and not self.word.quoted and self.word.literal() in CONTROL_WORDS:
                    self.control = self.control or f"the keyword {self.word.literal()!r}"
                self.words.append(self.word)
            self.word = None

    def _end_command(self) -> None:
        self._end_word()
        if self.words or self.control:
            self.commands.append(Command(self.words, self.start, control=self.control, cut=self.cut))
        self.words, self.control, self.cut, self.redirect = [], "", None, False

    def _flag(self, what: str) -> None:
        self.control = self.control or what

    # the characters ----------------------------------------------------------------------------------------

    def read(self) -> list[Command]:
        text, n = self.text, len(self.text)
        while self.i < n:
            c = text[self.i]
            nxt = text[self.i + 1] if self.i + 1 < n else ""
            if c == "\\" and nxt == "\n":
                self.i += 2
                self.line += 1
            elif c == "\\":
                self._add(nxt, quoted=True)
                self.i += 2
            elif c in BLANKS:
                self._end_word()
                self.i += 1
            elif c == "\n":
                self._end_command()
                self.line += 1
                self.i += 1
            elif c == "#" and self.word is None:
                self._comment()
            elif c == "'":
                self._single()
            elif c == '"':
                self._double()
            elif c == "$":
                self._dollar(in_double=False)
            elif c == "`":
                self._flag("command substitution (`...`)")
                self._add(c)
                self.i += 1
            elif c in ";|" or (c == "&" and nxt != ">"):
                self._end_command()
                self.i += 2 if nxt == c else 1
            elif c in "<>" or (c == "&" and nxt == ">"):
                self._redirection()
            elif c in "()":
                self._flag("a subshell or function definition (parentheses)")
                self._end_word()
                self.i += 1
            else:
                self._add(c)
                self.i += 1
        self._end_command()
        return self.commands

    def _comment(self) -> None:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        body = self.text[self.i : end]
        own_line = self.text[self.text.rfind("\n", 0, self.i) + 1 : self.i].strip(BLANKS) == ""
        if self.words:  # bash: the comment runs to the end of the line, whose newline ends the command
            if own_line and self.cut is None:  # a whole line, inside the command's `\` continuation
                self.cut = (self.line, body)
        else:
            self.comment_lines.append((self.line, body))
        self.i = end

    def _single(self) -> None:
        end = self.text.find("'", self.i + 1)
        if end < 0:
            raise ShellError(self.line, "no closing quotation (a ' opened here is never closed)")
        body = self.text[self.i + 1 : end]
        self._add(body, quoted=True)
        self.line += body.count("\n")
        self.i = end + 1

    def _double(self) -> None:
        start_line, text, n = self.line, self.text, len(self.text)
        self.i += 1
        self._add("", quoted=True)
        while True:
            if self.i >= n:
                raise ShellError(start_line, 'no closing quotation (a " opened here is never closed)')
            c = text[self.i]
            nxt = text[self.i + 1] if self.i + 1 < n else ""
            if c == '"':
                self.i += 1
                return
            if c == "\\" and nxt == "\n":
                self.i += 2
                self.line += 1
            elif c == "\\" and nxt in '$`"\\':
                self._add(nxt, quoted=True)
                self.i += 2
            elif c == "$":
                self._dollar(in_double=True)
            elif c == "`":
                self._flag("command substitution (`...`)")
                self._add(c, quoted=True)
                self.i += 1
            else:
                self.line += c == "\n"
                self._add(c, quoted=True)
                self.i += 1

    def _dollar(self, in_double: bool) -> None:
        text, i = self.text, self.i
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if nxt == "(":
            self._flag("command substitution ($(...))")
            self._add("$", quoted=in_double)
            self.i += 1
        elif nxt == "'" and not in_double:
            self._ansi_c()
        elif nxt == "{":
            end = text.find("}", i + 2)
            if end < 0:
                raise ShellError(self.line, "no closing } for ${")
            inner = text[i + 2 : end]
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+)(?::?[-=](.*))?", inner, re.DOTALL)
            raw = text[i : end + 1]
            if m:
                self._add(Var(m.group(1), raw, m.group(2)), quoted=in_double)
            else:  # ${#x}, ${x/a/b}: kept as written
                self._add(raw, quoted=in_double)
            self.i = end + 1
        else:
            m = NAME_RE.match(text, i + 1) or re.compile(r"[0-9@*#?$!-]").match(text, i + 1)
            if m:
                self._add(Var(m.group(0), "$" + m.group(0)), quoted=in_double)
                self.i = m.end()
            else:
                self._add("$", quoted=in_double)
                self.i += 1

    def _ansi_c(self) -> None:
        text, i, out = self.text, self.i + 2, []
        while i < len(text) and text[i] != "'":
            if text[i] == "\\" and i + 1 < len(text):
                out.append(ANSI_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
            else:
                self.line += text[i] == "\n"
                out.append(text[i])
                i += 1
        if i >= len(text):
            raise ShellError(self.line, "no closing quotation (a $' opened here is never closed)")
        self._add("".join(out), quoted=True)
        self.i = i + 1

    def _redirection(self) -> None:
        """`[n]>file`, `>>file`, `2>&1`, `&>file`, `<file`: dropped with their target; `<<` (a here-document)
        is refused, since its body lines are not commands."""
        if self.word is not None and not self.word.quoted and self.word.literal().isdigit():
            self.word = None  # the file descriptor of `2>`
        else:
            self._end_word()
        text = self.text
        if text.startswith("<<", self.i) and not text.startswith("<<<", self.i):
            self._flag("a here-document (<<)")
        m = re.compile(r"&>>?|>>|>&|>\||<>|<&|<<<|<<-?|[<>]").match(text, self.i)
        self.i = m.end() if m else self.i + 1
        self.redirect = True


def _uncommented(lines: list[tuple[int, str]]) -> tuple[int, str]:
    """A block of consecutive comment lines as text without their `#`s: (first line, text)."""
    return lines[0][0], "\n".join(re.sub(r"^#+ ?", "", body) for _, body in lines)


def _blocks(comment_lines: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    blocks: list[list[tuple[int, str]]] = []
    for number, body in comment_lines:
        if blocks and blocks[-1][-1][0] == number - 1:
            blocks[-1].append((number, body))
        else:
            blocks.append([(number, body)])
    return blocks


def _read_commented(block: list[tuple[int, str]]) -> list[Command]:
    """The commands of a comment block; prose lines that do not read as shell (an apostrophe) are left
    out one at a time until the rest reads."""
    block = list(block)
    for _ in range(len(block)):
        first, text = _uncommented(block)
        try:
            found = _Reader(text, first).read()
        except ShellError as exc:
            block = [(n, "" if n == exc.line else body) for n, body in block]
            continue
        return [dataclasses.replace(c, commented=True) for c in found]
    return []


def read(text: str) -> list[Command]:
    """Every simple command of `text`, those in comment blocks included (marked `commented`), in line
    order. Raises ShellError where bash would not read the text (an unclosed quote)."""
    reader = _Reader(text, 1)
    commands = reader.read()
    for block in _blocks(reader.comment_lines):
        commands += _read_commented(block)
    return sorted(commands, key=lambda c: c.line)
