"""Package data: tiny trained models and golden files (each made by a script in scripts/)."""
