"""``launcher=ray``: each worker group is a set of Ray actors; see :mod:`rlloom_ray.launcher`."""

from rlloom_ray.config import RayLauncherConfig
from rlloom_ray.errors import WorkerError
from rlloom_ray.launcher import RayLauncher

__all__ = ["RayLauncher", "RayLauncherConfig", "WorkerError"]
