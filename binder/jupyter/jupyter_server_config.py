# Read by the Jupyter server beside jupyter_server_config.json (binder/start puts this folder on JUPYTER_CONFIG_PATH).
# JupyterLab's settings defaults for the course, the same folder `make lab` gives it (tools/lab.py): no prompt about
# Jupyter's news feed at the first start and no check for JupyterLab updates (the course pins its version). A path,
# so it is worked out from where this file is, wherever the image puts the course.
from pathlib import Path

c.LabApp.app_settings_dir = str(Path(__file__).resolve().parents[2] / "tools" / "lab_settings")  # noqa: F821
