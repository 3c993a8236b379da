"""Compute-normalised evaluation of TTS methods: datasets, runner, metrics, report."""
