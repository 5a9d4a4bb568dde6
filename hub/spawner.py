"""The class hub's spawner (jupyterhub_config.py): JupyterHub's LocalProcessSpawner, which starts each learner's server
as a local process of the learner's own system user, plus the limits the kernel can enforce on such a process.

LocalProcessSpawner enforces neither ``mem_limit`` nor ``cpu_limit`` (JupyterHub's documentation says so: they need a
spawner that runs servers in a container or a cgroup). What a plain process can be held to are its resource limits
(setrlimit), set here in the new process before it becomes the learner, at both the soft and the hard value, so the
learner cannot raise them; the server and every kernel it starts inherit them:

- ``address_space_limit`` (RLIMIT_AS): the virtual memory of *each* process, the server and each kernel alike. A
  kernel that asks for more gets a MemoryError (torch: "DefaultCPUAllocator: can't allocate memory") instead of
  pushing the machine into swap or the out-of-memory killer. It is per process, not per learner: a learner with
  three kernels open can use three times as much.
- ``process_limit`` (RLIMIT_NPROC): the processes and threads of the learner's user, all together (the kernel counts
  them per user): a runaway loop of subprocesses stops there.
- ``file_size_limit`` (RLIMIT_FSIZE): the largest file a learner's process can write.

CPU time is not limited (RLIMIT_CPU would kill a long-lived server); each learner's processes run at a lower
priority (``niceness``) than the hub, so the hub and the proxy stay responsive on a busy machine. For real per-learner
memory and CPU limits, use Zero to JupyterHub (hub/z2jh-values.yaml) or a spawner that uses cgroups.
"""

from __future__ import annotations

import os
import resource

from jupyterhub.spawner import LocalProcessSpawner
from jupyterhub.traitlets import ByteSpecification
from traitlets import Integer


class CourseSpawner(LocalProcessSpawner):
    address_space_limit = ByteSpecification(
        None, allow_none=True, help="Virtual memory of each of a learner's processes (RLIMIT_AS); None: unlimited"
    ).tag(config=True)
    process_limit = Integer(
        0, help="Processes and threads of a learner's user, all together (RLIMIT_NPROC); 0: unlimited"
    ).tag(config=True)
    file_size_limit = ByteSpecification(
        None, allow_none=True, help="Largest file a learner's process can write (RLIMIT_FSIZE); None: unlimited"
    ).tag(config=True)
    niceness = Integer(0, help="Added to the learner's processes' nice value (0: as the hub's)").tag(config=True)

    def rlimits(self) -> list[tuple[int, int]]:
        """(resource, value) for every limit that is set."""
        limits = [
            (resource.RLIMIT_AS, self.address_space_limit),
            (resource.RLIMIT_NPROC, self.process_limit or None),
            (resource.RLIMIT_FSIZE, self.file_size_limit),
        ]
        return [(kind, int(value)) for kind, value in limits if value]

    def make_preexec_fn(self, name):
        become_learner = super().make_preexec_fn(name)
        limits, niceness = self.rlimits(), self.niceness

        def preexec():  # in the new process, still as root: limits first, then the learner's user
            for kind, value in limits:
                resource.setrlimit(kind, (value, value))
            if niceness:
                os.nice(niceness)
            become_learner()

        return preexec
