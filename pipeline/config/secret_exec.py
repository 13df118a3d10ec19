"""OpenClaw's ``exec`` secret provider: run a resolver binary and read the secret from its stdout.

The contract is OpenClaw's (docs/gateway/secrets.md), so a provider that works for the gateway
works here unchanged: ``secrets.providers.<name> = {source: "exec", command, args?, env?, passEnv?,
jsonOnly?, timeoutMs?, noOutputTimeoutMs?, maxOutputBytes?, allowSymlinkCommand?, trustedDirs?}``.
The command is an absolute path run without a shell, with an environment made only of ``env`` and
the ``passEnv`` names (a resolver never sees our API keys by accident). It gets
``{"protocolVersion": 1, "provider": name, "ids": [id]}`` on stdin and answers
``{"protocolVersion": 1, "values": {id: secret}, "errors"?: {id: {message}}}``; with
``jsonOnly: false`` a plain (non-JSON) stdout is the value of the one id asked for.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping

from memindex.pipeline.errors import ConfigError

# OpenClaw's defaults for the exec provider.
DEFAULT_TIMEOUT_MS = 5000
DEFAULT_MAX_OUTPUT_BYTES = 1 << 20
EXEC_PROVIDER_KEYS = frozenset({
    "source", "command", "args", "env", "passEnv", "jsonOnly", "timeoutMs", "noOutputTimeoutMs",
    "maxOutputBytes", "allowSymlinkCommand", "trustedDirs", "allowInsecurePath",
})


def _positive_ms(provider: Mapping[str, Any], name: str, default: int, where: str, key: str) -> float:
    value = provider.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(key, f"{where}.{name} must be a positive number of milliseconds, got {value!r}")
    return float(value) / 1000.0


def _string_list(provider: Mapping[str, Any], name: str, where: str, key: str) -> list[str]:
    value = provider.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(key, f"{where}.{name} must be a list of strings")
    return list(value)


def _checked_command(provider: Mapping[str, Any], where: str, key: str) -> str:
    """The command path, refused unless absolute, a regular executable file, and (when symlinked or
    when ``trustedDirs`` is set) inside a trusted directory."""
    command = provider.get("command")
    if not isinstance(command, str) or not os.path.isabs(command):
        raise ConfigError(key, f"{where}.command must be an absolute path to the resolver binary")
    path = Path(command)
    trusted = [Path(d).resolve() for d in _string_list(provider, "trustedDirs", where, key)]
    if path.is_symlink():
        if provider.get("allowSymlinkCommand") is not True:
            raise ConfigError(key, f"{where}.command {command} is a symlink (set allowSymlinkCommand: true "
                                   "with trustedDirs to allow it)")
        if not trusted:
            raise ConfigError(key, f"{where}.command {command} is a symlink; allowSymlinkCommand needs trustedDirs")
    target = path.resolve()
    if trusted and not any(target.is_relative_to(d) for d in trusted):
        raise ConfigError(key, f"{where}.command {command} resolves to {target}, outside {where}.trustedDirs")
    if not target.is_file() or not os.access(target, os.X_OK):
        raise ConfigError(key, f"{where}.command {command} is not an executable file")
    return str(target)


def _child_env(provider: Mapping[str, Any], env: Mapping[str, str], where: str, key: str) -> dict[str, str]:
    fixed = provider.get("env", {})
    if not isinstance(fixed, dict) or not all(isinstance(v, str) for v in fixed.values()):
        raise ConfigError(key, f"{where}.env must map names to strings")
    child = {n: env[n] for n in _string_list(provider, "passEnv", where, key) if n in env}
    child.update(fixed)
    return child


def _run(argv: list[str], stdin: bytes, child_env: dict[str, str], timeout_s: float, quiet_s: float,
         max_bytes: int, where: str, key: str) -> bytes:
    """Run the resolver; kill it on the overall timeout, on ``quiet_s`` without output, or when it
    writes more than ``max_bytes``."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=child_env, close_fds=True)
    except OSError as exc:
        raise ConfigError(key, f"{where}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stdout is not None
    try:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # a resolver that ignores stdin may exit before reading it
        out = bytearray()
        start = last = time.monotonic()
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now - start > timeout_s:
                    raise ConfigError(key, f"{where}: {argv[0]} timed out after {timeout_s * 1000:.0f} ms")
                if now - last > quiet_s:
                    raise ConfigError(key, f"{where}: {argv[0]} produced no output for {quiet_s * 1000:.0f} ms")
                if not sel.select(timeout=min(0.05, timeout_s)):
                    continue
                data = os.read(proc.stdout.fileno(), 65536)
                if not data:
                    break
                out += data
                last = time.monotonic()
                if len(out) > max_bytes:
                    raise ConfigError(key, f"{where}: {argv[0]} wrote more than maxOutputBytes ({max_bytes})")
        code = proc.wait(timeout=max(0.1, timeout_s - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        raise ConfigError(key, f"{where}: {argv[0]} timed out after {timeout_s * 1000:.0f} ms") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if code != 0:
        raise ConfigError(key, f"{where}: {argv[0]} exited with status {code}")
    return bytes(out)


def resolve_exec_secret(provider: Mapping[str, Any], name: str, ident: str, env: Mapping[str, str],
                        key: str) -> str:
    """The secret ``ident`` from the exec provider ``name`` (its config is ``provider``)."""
    where = f"secrets.providers.{name}"
    unknown = sorted(set(provider) - EXEC_PROVIDER_KEYS)
    if unknown:
        raise ConfigError(key, f"{where} has unknown key(s): {', '.join(unknown)}")
    argv = [_checked_command(provider, where, key), *_string_list(provider, "args", where, key)]
    timeout_s = _positive_ms(provider, "timeoutMs", DEFAULT_TIMEOUT_MS, where, key)
    quiet_s = _positive_ms(provider, "noOutputTimeoutMs", int(timeout_s * 1000), where, key)
    max_bytes = provider.get("maxOutputBytes", DEFAULT_MAX_OUTPUT_BYTES)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ConfigError(key, f"{where}.maxOutputBytes must be a positive integer")
    json_only = provider.get("jsonOnly", True)
    request = json.dumps({"protocolVersion": 1, "provider": name, "ids": [ident]}).encode()
    raw = _run(argv, request, _child_env(provider, env, where, key), timeout_s, quiet_s, max_bytes, where, key)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(key, f"{where}: {argv[0]} wrote output that is not UTF-8") from None
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        if json_only is not False:
            raise ConfigError(key, f"{where}: {argv[0]} did not answer with a JSON object "
                                   "(set jsonOnly: false for a resolver that prints the bare secret)")
        value = text.rstrip("\r\n")
        if not value:
            raise ConfigError(key, f"{where}: {argv[0]} printed an empty secret")
        return value
    errors = answer.get("errors")
    if isinstance(errors, dict) and ident in errors:
        err = errors[ident]
        message = err.get("message") if isinstance(err, dict) else err
        raise ConfigError(key, f"{where} could not resolve {ident!r}: {message}")
    values = answer.get("values")
    found = values.get(ident) if isinstance(values, dict) else None
    if not isinstance(found, str) or not found:
        raise ConfigError(key, f"{where}: {argv[0]} returned no string value for {ident!r}")
    return found
