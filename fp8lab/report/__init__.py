"""From measurement to reader: tidy tables with provenance, their verification against git, the
house plot style, the claims ledger, the gallery, cross-device overlays and kernel excerpts."""
