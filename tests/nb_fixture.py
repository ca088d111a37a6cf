"""Fixture notebooks for the runner's tests: a parameters cell, then code cells."""

import nbformat


def make_notebook(*cells: str, params: str = 'mode = "auto"', title: str | None = None):
    """A python3 notebook: an optional markdown ``title`` cell, the cell tagged 'parameters'
    holding ``params``, then one code cell per string in ``cells``."""
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell(params)
    p.metadata["tags"] = ["parameters"]
    head = [nbformat.v4.new_markdown_cell(title)] if title else []
    nb.cells = head + [p] + [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def write_manifest(nbdir, notebooks: dict, *, kind=lambda name: "host", timeout=lambda name: 120,
                   title=lambda name: name):
    """Write each {name: notebook} into ``nbdir`` as ``name.ipynb`` and a manifest.yaml listing
    them (id: the name's first two characters; ``kind`` / ``timeout`` / ``title``: per name);
    returns the manifest's path."""
    import yaml

    entries = []
    for name, nb in notebooks.items():
        nbformat.write(nb, nbdir / f"{name}.ipynb")
        entries.append({"id": name[:2], "name": name, "title": title(name), "kind": kind(name),
                        "timeout": timeout(name)})
    manifest = nbdir / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({"notebooks": entries}))
    return manifest
