#!/usr/bin/python3 -I
"""``sudo`` inside a sandbox: run a command as root in the sandbox's user namespace.

Passwordless (as in E2B sandboxes). Sends argv, cwd and environment with this
process's stdin/stdout/stderr to the sandbox's supervisor (abstract socket
``agentbus-sudo``, private to the sandbox), waits for the command and exits
with its status. Root there has no power over the host (see jailcalls.py).
Understands ``-E``, ``-H``, ``-n``, ``-S``, ``-u root`` and ``--``; nothing else.
"""

import json
import os
import socket
import sys

SOCKET = "\0agentbus-sudo"
USAGE = "usage: sudo [-EHnS] [-u root] [--] command [args...]"


def parse(args: list[str]) -> list[str]:
    """The command after sudo's own options (exits on what it does not support)."""
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt == "--":
            break
        if opt == "-u":
            if not args or args.pop(0) not in ("root", "0", "#0"):
                sys.exit("sudo: only root is available in this sandbox")
        elif opt not in ("-E", "-H", "-n", "-S", "-EH", "-HE"):
            sys.exit(f"sudo: option {opt} is not supported\n{USAGE}")
    if not args:
        sys.exit(USAGE)
    return args


def main() -> int:
    """Ask the supervisor, wait, exit like the command did."""
    argv = parse(sys.argv[1:])
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(SOCKET)
            socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
        except OSError as exc:
            sys.exit(f"sudo: the sandbox supervisor is unreachable: {exc}")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    answer = json.loads(reply or b"{}")
    if "error" in answer or "status" not in answer:
        sys.exit(f"sudo: {answer.get('error', 'no answer')}")
    status = int(answer["status"])
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
