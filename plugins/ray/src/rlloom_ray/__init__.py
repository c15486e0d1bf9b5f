"""``launcher=ray``: each worker group is a set of Ray actors; see :mod:`rlloom_ray.launcher`."""

from rlloom.lazy import lazy_exports

__all__ = ["RayLauncher", "RayLauncherConfig", "WorkerError"]

__getattr__ = lazy_exports(__name__, {  # imported on first use: the plugin registers without torch
    "RayLauncherConfig": ".config",
    "WorkerError": ".errors",
    "RayLauncher": ".launcher",
})
