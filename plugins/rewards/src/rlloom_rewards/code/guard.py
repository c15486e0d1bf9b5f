"""The sandbox's child side: ``python -I -S -B guard.py '<settings JSON>'``.

Runs in the fresh child process started by :func:`rlloom_rewards.code.sandbox.run_python`, before
any untrusted code, in this order (standard library only):

0. **As root, kernel containment** (:mod:`rlloom_rewards.code.jail`): new mount, PID, network, IPC
   and UTS namespaces, a private size-capped tmpfs as root (read-only system directories, writable
   ``/work``, ``/tmp``, ``/dev/shm``), no new privileges; steps 4-6 then run in ``/work`` of it.
1. **No network** (without root; as root step 0 did it): a new, empty network namespace
   (``unshare(CLONE_NEWNET)``, inside a new user namespace). Whether it worked or not, step 5 blocks socket use too.
2. **Resource limits** (soft = hard, so the program cannot raise them): ``RLIMIT_CPU`` (seconds of
   CPU; SIGXCPU), ``RLIMIT_AS`` (address space, bytes; allocations fail with ``MemoryError``),
   ``RLIMIT_FSIZE`` (largest file written, bytes; SIGXFSZ), ``RLIMIT_NPROC`` (processes of the
   user; ``fork`` fails beyond it), ``RLIMIT_CORE`` = 0.
3. **Unprivileged user**: when started as root, switch to the settings' uid/gid (``nobody``) with no
   supplementary groups (root ignores ``RLIMIT_NPROC`` and file permissions).
4. ``chdir`` into the throw-away working directory.
5. **Audit hook** (``sys.addaudithook``, cannot be removed): refuses with ``PermissionError`` every
   ``socket.*`` event; opening a file for writing, creating, removing, renaming, linking or
   changing the metadata of a path whose real path is outside the working directory; starting
   another program (``os.exec*``, ``os.system``, ``os.posix_spawn``, ``subprocess.Popen``,
   ``os.spawn*``); signalling other processes; and every ``ctypes.*`` event (no way around the hook
   through raw memory). ``os.fork`` is allowed: copies keep the hook and count against
   ``RLIMIT_NPROC``.
6. Compile and run ``solution.py`` of the working directory as ``__main__``; an uncaught exception
   prints its traceback and exits with 1.
7. With ``serve`` in the settings (``{"requests_fd", "replies_fd"}``, pipes inherited from the parent),
   answer the trusted tester's calls into the module's functions (:func:`wire.serve
   <rlloom_rewards.code.wire.serve>`) until it closes its pipe. That is how ``reward=code`` scores
   (:mod:`rlloom_rewards.code.harness`); without ``serve`` the exit status is the only outcome.

A setup failure exits with :data:`SETUP_FAILED` after printing why on stderr.
"""

import json
import os
import resource
import sys
import traceback

SETUP_FAILED = 113
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

BLOCKED_PREFIXES = ("socket.", "ctypes.")
BLOCKED_EVENTS = frozenset({
    "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile", "subprocess.Popen",
    "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn",
})
# Events that write to paths: event -> positions of the path arguments that must stay inside.
PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.truncate": (0,), "os.utime": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,),
    "shutil.rmtree": (0,), "shutil.chown": (0,),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def isolate_network(as_root: bool) -> None:
    """Move this process into a new network namespace, if the kernel allows it (see step 1)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET if as_root else CLONE_NEWUSER | CLONE_NEWNET)


def limit_resources(settings: dict) -> None:
    limits = {
        resource.RLIMIT_CPU: settings["cpu_s"],
        resource.RLIMIT_AS: settings["memory_bytes"],
        resource.RLIMIT_FSIZE: settings["file_size_bytes"],
        resource.RLIMIT_NPROC: settings["max_processes"],
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in limits.items():
        resource.setrlimit(kind, (value, value))


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def make_hook(root: str):
    """The audit hook of step 5 for the working directory ``root`` (a real path)."""

    def inside(path) -> bool:
        if isinstance(path, int):  # an open file descriptor: its file was checked when opened
            return True
        real = os.path.realpath(os.fsdecode(path))
        return real == root or real.startswith(root + os.sep)

    def hook(event, args):
        if event.startswith(BLOCKED_PREFIXES) or event in BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writes and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the working directory is not allowed")
        elif event in PATH_EVENTS:
            for position in PATH_EVENTS[event]:
                if position < len(args) and args[position] is not None and not inside(args[position]):
                    raise PermissionError(f"sandbox: {event} on {args[position]!r} outside the working directory")

    return hook


def main() -> None:
    settings = json.loads(sys.argv[1])
    try:
        as_root = os.geteuid() == 0
        with open(os.path.join(settings["workdir"], "solution.py"), encoding="utf-8") as f:
            source = f.read()
        serve = settings.get("serve")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import wire  # before the jail hides this directory

        if as_root:
            import jail
        del sys.path[0]
        if as_root:
            pipes = (serve["requests_fd"], serve["replies_fd"]) if serve else ()
            jail.enter(source, settings["workdir"], settings["disk_bytes"], settings["uid"], settings["gid"], pipes)
            workdir = jail.WORKDIR
        else:
            if settings["isolate_network"]:
                isolate_network(as_root)
            workdir = settings["workdir"]
            os.chdir(workdir)
        limit_resources(settings)
        if as_root:
            drop_privileges(settings["uid"], settings["gid"])
        hook = make_hook(os.path.realpath(workdir))
        for name in [name for name in sys.modules if name == "ctypes" or name.startswith("ctypes.")]:
            del sys.modules[name]
    except Exception as exc:  # noqa: BLE001 - report any setup failure as such
        print(f"rlloom sandbox setup failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(SETUP_FAILED)
    sys.addaudithook(hook)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        code = compile(source, "solution.py", "exec")
        exec(code, namespace)  # noqa: S102 - running it is the point
        if serve:
            wire.serve(namespace, serve["requests_fd"], serve["replies_fd"])
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - the program's own failure: report it, exit 1
        traceback.print_exc()
        sys.stderr.flush()
        sys.exit(1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
