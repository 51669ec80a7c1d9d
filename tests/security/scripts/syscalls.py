"""Run inside a sandbox: try each escape syscall, print {name: errno name|"ok"}."""

import ctypes
import errno
import json
import multiprocessing
import os
import subprocess
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"bpf": 321, "perf_event_open": 298, "keyctl": 250, "clone": 56, "setns": 308}
SIGCHLD = 17


def result(ret: int) -> str:
    if ret >= 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def supervisor_pid() -> int:
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"\0-I\0-S\0-c\0" in f.read():
                return pid
        with open(f"/proc/{pid}/stat", "rb") as f:
            pid = int(f.read().rsplit(b")", 1)[1].split()[1])
    raise SystemExit("no supervisor found")


def clone_new(flag: int) -> str:
    ret = libc.syscall(NR["clone"], flag | SIGCHLD, 0, 0, 0, 0)
    if ret == 0:
        os._exit(0)  # the child, if the kernel let it through
    if ret > 0:
        os.waitpid(ret, 0)
    return result(ret)


def read_mem(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/mem", "rb") as f:
            f.read(1)
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return "ok"


out = {}
sup = supervisor_pid()
out["unshare(CLONE_NEWUSER)"] = result(libc.unshare(0x10000000))
out["unshare(CLONE_NEWNS)"] = result(libc.unshare(0x00020000))
out["clone(CLONE_NEWUSER)"] = clone_new(0x10000000)
out["clone(CLONE_NEWNET)"] = clone_new(0x40000000)
out["mount"] = result(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
out["bpf"] = result(libc.syscall(NR["bpf"], 0, 0, 0))
out["perf_event_open"] = result(libc.syscall(NR["perf_event_open"], 0, 0, -1, -1, 0))
out["keyctl"] = result(libc.syscall(NR["keyctl"], 0, 0, 0, 0, 0))
out["ptrace(ATTACH supervisor)"] = result(libc.ptrace(16, sup, 0, 0))
out["/proc/supervisor/mem"] = read_mem(sup)
out["unshare -Ur (util-linux)"] = str(
    subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode
)
# What sandbox code does need still works.
out["fork+exec"] = str(subprocess.run(["true"]).returncode)
t = threading.Thread(target=lambda: None)
t.start()
t.join()
out["thread"] = "ok"
multiprocessing.Lock()  # POSIX semaphore in /dev/shm
out["semaphore"] = "ok"
print(json.dumps(out))
