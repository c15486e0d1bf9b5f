"""Kernel containment for the sandbox's child (standard library only; run by ``guard.py`` as root).

:func:`enter` moves the calling root process into new mount, PID, network, IPC and UTS namespaces
and forks. The forked process is PID 1 of the new PID namespace; the original process stays outside
(root, out of the candidate's reach), waits for it and ends the same way it did. SIGTERM to that
outside process SIGKILLs PID 1 (through a pidfd, so never a reused pid): the kernel then kills every
process of the namespace, ``setsid`` and double-forked ones included, and PID 1 is reaped only after
they are all gone. PID 1 returns from :func:`enter` inside a new root: a size-capped tmpfs holding
read-only bind mounts of ``/usr``, ``/bin``, ``/lib*`` and ``/etc/ld.so.cache``, the devices
``null``, ``zero``, ``random``, ``urandom``, a fresh ``/proc``, world-writable ``/tmp`` and ``/dev/shm``
and ``/work`` (containing only ``solution.py``), the only writable places. Nothing else of the host
(the project, data, other candidates' directories, ``/tmp``) is visible. The mounts vanish with the
namespace's last process.
"""

import ctypes
import os
import signal

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = 155  # x86-64
PR_SET_NO_NEW_PRIVS = 38
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
SYSTEM_FILES = ("etc/ld.so.cache",)
DEVICES = ("null", "zero", "random", "urandom")
WORKDIR = "/work"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = [None if s is None else os.fsencode(s) for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _bind_read_only(source: str, target: str, extra: int = MS_NODEV) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | extra)


def _build_root(root: str, source: str, disk_bytes: int, uid: int, gid: int) -> None:
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_bytes},mode=0755")
    for name in SYSTEM_DIRS:
        host = "/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), os.path.join(root, name))
        elif os.path.isdir(host):
            os.mkdir(os.path.join(root, name))
            _bind_read_only(host, os.path.join(root, name))
    for name in ("etc", "dev", "proc"):
        os.mkdir(os.path.join(root, name), 0o755)
    for name in SYSTEM_FILES + tuple("dev/" + d for d in DEVICES):
        if os.path.exists("/" + name):
            open(os.path.join(root, name), "w").close()
            _bind_read_only("/" + name, os.path.join(root, name), extra=0 if name.startswith("dev/") else MS_NODEV)
    for name in ("tmp", "dev/shm"):
        os.mkdir(os.path.join(root, name))
        os.chmod(os.path.join(root, name), 0o1777)
    os.mkdir(root + WORKDIR, 0o755)
    with open(root + WORKDIR + "/solution.py", "w", encoding="utf-8") as f:
        f.write(source)
    os.chown(root + WORKDIR, uid, gid)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _pivot(root: str) -> None:
    os.chdir(root)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def _wait_and_mirror(pid: int) -> None:
    """Outside process: wait for PID 1 (SIGKILL it on SIGTERM) and end as it did (same exit status or signal)."""
    pidfd = os.pidfd_open(pid)
    signal.signal(signal.SIGTERM, lambda *_: signal.pidfd_send_signal(pidfd, signal.SIGKILL))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # cannot be caught, so needs no reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def enter(source: str, root: str, disk_bytes: int, uid: int, gid: int, inside_only: tuple[int, ...] = ()) -> None:
    """See the module doc. ``root`` is an empty directory of the host to build the new root on;
    on return the caller is PID 1 of the namespace, in ``/work``, still root, with no new privileges.
    The outside process closes the descriptors ``inside_only`` (pipes only the namespace may hold, so
    that they reach end-of-file when it ends)."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid:
        for fd in inside_only:
            os.close(fd)
        _wait_and_mirror(pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _build_root(root, source, disk_bytes, uid, gid)
    _pivot(root)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.chdir(WORKDIR)
