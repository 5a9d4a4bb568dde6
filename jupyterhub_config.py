"""JupyterHub for a class on one server: `make hub` (as root) starts it from this file; docs/instructors.md, "A class
on one server", says how to set one up and what an instructor changes for a real class.

- Learners are the machine's system users in the class's Unix group (``ATTNEDU_HUB_GROUP``, default ``attnedu``).
  They log in with their system password, checked by PAM (JupyterHub's default authenticator): the accounts exist
  anyway, since each learner's server runs as their own user, and that is what keeps one learner out of another's
  files (plain Unix permissions); no other package, and nothing reached over the network. Only the group's members
  may log in; root never. ``ATTNEDU_HUB_ADMINS``: admin users, comma-separated (none by default).
- Each learner's server is a local process of their user (hub/spawner.py), started by hub/singleuser.py: the course
  (this repository's lessons and exercises) shared and read-only, their own private and persistent
  ``~/attnedu/work/`` filled as ``make lab`` fills work/, the course's install and kernel (this repository's .venv),
  JupyterLab's settings of ``make lab``, nbgrader's extensions off (hub/jupyter/: they are the instructor's), and
  per-process limits (hub/spawner.py says what is and is not limited).
- The hub listens on 127.0.0.1:8000 (``ATTNEDU_HUB_IP``, ``ATTNEDU_HUB_PORT``); its proxy is configurable-http-proxy
  from hub/node_modules (``npm ci`` in hub/, pinned by hub/package-lock.json). Its database, cookie secret and the
  proxy's pid file go in ``ATTNEDU_HUB_STATE`` (default hub/state/, git-ignored, mode 700).

Any setting can still be changed on the command line, e.g. ``jupyterhub -f jupyterhub_config.py --port=8443``
(make hub ARGS="..."), or in a file of your own that ends with ``load_subconfig("jupyterhub_config.py")``.
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (JupyterHub provides it)

COURSE = Path(__file__).resolve().parent
sys.path.insert(0, str(COURSE / "hub"))
from spawner import CourseSpawner  # noqa: E402

PYTHON = COURSE / ".venv" / "bin" / "python"  # the course's install (make instructor), and its kernel
STATE = Path(os.environ.get("ATTNEDU_HUB_STATE", COURSE / "hub" / "state")).resolve()
STATE.mkdir(mode=0o700, parents=True, exist_ok=True)
STATE.chmod(0o700)  # the cookie secret and the database: the hub's alone

# Where the hub listens; behind it, the proxy's API and the hub's own API stay on loopback (their defaults)
c.JupyterHub.ip = os.environ.get("ATTNEDU_HUB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("ATTNEDU_HUB_PORT", "8000"))
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")
c.ConfigurableHTTPProxy.command = [str(COURSE / "hub" / "node_modules" / ".bin" / "configurable-http-proxy")]
# The proxy's token is made afresh at each start (JupyterHub's default) and handed to the proxy in its environment.
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every learner's server (the default, said here)

# Who may log in: the class's Unix group (PAM checks the password), never root
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {os.environ.get("ATTNEDU_HUB_GROUP", "attnedu")}
c.Authenticator.admin_users = {name for name in os.environ.get("ATTNEDU_HUB_ADMINS", "").split(",") if name}
c.Authenticator.blocked_users = {"root"}

# Each learner's server: a process of their own user, the course read-only, their work/ their own
c.JupyterHub.spawner_class = CourseSpawner
c.Spawner.cmd = [str(PYTHON), str(COURSE / "hub" / "singleuser.py")]
c.Spawner.default_url = "/lab/tree/notebooks/01_rnn_bottleneck.ipynb"
# The kernels import the package of the course this hub serves (the one beside this file), whatever else the install
# has; JupyterHub passes the hub's own environment to no learner.
c.Spawner.environment = {"PYTHONPATH": str(COURSE)}
c.Spawner.start_timeout = 120  # a busy two-core machine takes its time to start a server
c.Spawner.http_timeout = 120
# Limits (hub/spawner.py): a lesson needs at most 2 GiB of memory (benchmarks/notebooks.md: peaks of 280-711 MiB);
# its kernel's virtual memory (torch maps much more than it uses) stays well under 8 GiB.
c.CourseSpawner.address_space_limit = os.environ.get("ATTNEDU_HUB_PROCESS_MEMORY", "8G")
c.CourseSpawner.process_limit = int(os.environ.get("ATTNEDU_HUB_PROCESSES", "512"))
c.CourseSpawner.file_size_limit = "1G"
c.CourseSpawner.niceness = 5
