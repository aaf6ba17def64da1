"""A container's command line as the process will see it, split into commands.

Kubernetes runs `command + args` (`command` replaces the image ENTRYPOINT,
`args` its CMD) after expanding `$(VAR)` from the container's environment;
`$$` escapes a `$`. A shell invocation (`sh -c "<script>"`) hides the real
commands in one string: that string is tokenised with `shlex` and split at
`;`, `&&`, `||`, `|`, `&` and newlines, so `sh -c "setup; python -m
dynamo.vllm --model X"` yields the `python` command with its flags. Tokens
from a script are marked `shell` (their meaning is inferred, not declared).
Pure; no shell is ever run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from aibom_core.scrape import EnvVar

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "\n"})
_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SHELL_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    pointer: str  # the command/args element it came from
    shell: bool  # read out of a shell script string


@dataclass(frozen=True, slots=True)
class Env:
    """A container's environment: literal values, and names set from elsewhere."""

    values: dict[str, str]
    value_from: dict[str, str]  # name -> "secretKeyRef", ...

    @classmethod
    def of(cls, env: tuple[EnvVar, ...]) -> Env:
        values: dict[str, str] = {}
        value_from: dict[str, str] = {}
        # The container's own entries come first; later duplicates (graph-wide
        # env merged by an operator) do not override them.
        for var in env:
            if var.name in values or var.name in value_from:
                continue
            if var.value is not None:
                values[var.name] = var.value
            else:
                value_from[var.name] = var.value_from or "valueFrom"
        return cls(values=values, value_from=value_from)


def expand_k8s(text: str, env: Env) -> str:
    """`$(VAR)` expansion as the kubelet does it; unknown references stay as written."""
    if "$" not in text:
        return text

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.values.get(name, match.group(0))

    return _K8S_VAR.sub(sub, text)


def unresolved_reference(text: str, env: Env, *, shell: bool) -> str | None:
    """Why a value that still holds a variable reference cannot be known, or None."""
    for match in _K8S_VAR.finditer(text):
        name = match.group(1)
        if name is not None:
            return _why(name, env)
    if shell:
        for match in _SHELL_VAR.finditer(text):
            return _why(match.group(1) or match.group(2), env)
    return None


def _why(name: str, env: Env) -> str:
    if name in env.value_from:
        return f"${name} is set from a {env.value_from[name]}"
    return f"${name} is not set in the spec"


def expand_shell(text: str, env: Env) -> str:
    """`$VAR` / `${VAR}` from literal env values (a shell would); unknown ones stay."""
    if "$" not in text:
        return text

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env.values.get(name, match.group(0))

    return _SHELL_VAR.sub(sub, text)


def _split_script(script: str) -> list[str]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: fall back to whitespace
        return script.split()


def _script_segments(script: str, ptr: str) -> list[list[Token]]:
    # A backslash-newline continues a line; any other newline ends a command
    # (shlex alone would treat it as a space).
    script = script.replace("\\\n", " ").replace("\n", " ; ")
    segments: list[list[Token]] = [[]]
    for word in _split_script(script):
        if word in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(Token(word, ptr, True))
    return [s for s in segments if s]


def _is_shell_c(argv: list[Token], i: int) -> bool:
    """`sh -c`, `/bin/bash -lc`, `bash -ec` ... at position i."""
    if argv[i].text.rpartition("/")[2] not in _SHELLS or i + 1 >= len(argv):
        return False
    flag = argv[i + 1].text
    return flag.startswith("-") and not flag.startswith("--") and "c" in flag[1:]


def segments(
    command: tuple[str, ...],
    command_pointer: str,
    args: tuple[str, ...],
    args_pointer: str,
    env: Env,
) -> list[list[Token]]:
    """The commands a container runs: the argv itself, or the commands of its shell script."""
    argv: list[Token] = []
    for base, words in ((command_pointer, command), (args_pointer, args)):
        for i, word in enumerate(words):
            ptr = f"{base}/{i}"
            text = expand_k8s(word, env)
            if " " in text.strip() and text.lstrip().startswith("-"):
                # One element holding several flags (`"--model X --port 1"`):
                # whatever splits it (an entrypoint script) is a guess.
                argv.extend(Token(w, ptr, True) for w in _split_script(text))
            else:
                argv.append(Token(text, ptr, False))
    for i in range(len(argv)):
        if _is_shell_c(argv, i) and i + 2 < len(argv):
            script = argv[i + 2]
            before = [argv[:i]] if i else []  # `env X=1 sh -c ...`
            return before + _script_segments(script.text, script.pointer)
    return [argv] if argv else []
