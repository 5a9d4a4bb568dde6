"""Small fixes to the course site (a local Sphinx extension, listed in _config.yml).

sphinx-thebe 0.3.1 adds its inline configuration script each time Sphinx reads the sources, and
Jupyter Book reads them twice, so every page declared `const THEBE_JS_URL` twice and the browser
logged "Identifier 'THEBE_JS_URL' has already been declared". This keeps the first copy of any
script a page would include twice (the same file or inline body and attributes, whatever its priority).
"""

from __future__ import annotations


def _unique_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        # an inline script's file name is None or "", depending on who added it
        key = (getattr(script, "filename", str(script)) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _unique_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
