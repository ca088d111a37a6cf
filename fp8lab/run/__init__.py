"""Running the notebooks: the manifest and the mode, the local runner and the Dask cluster, the
prebuild, JupyterLab, the figure gallery, the command line."""
