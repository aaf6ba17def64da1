"""aibom-rollup: the command line and the I/O edges shared by the webhook and the annotator."""
