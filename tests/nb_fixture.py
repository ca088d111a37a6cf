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
