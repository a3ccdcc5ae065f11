"""Field adaptation by incremental pseudo-labelling (stage `adapt`, docs/adaptation.md)."""
