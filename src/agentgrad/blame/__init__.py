"""Blame quality: planted-fault episodes, a trained scorer, blame methods and their measurement."""
