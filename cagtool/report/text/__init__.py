"""Record text on its way out: consoles (console.py), text made safe to show (safe_text.py) and safe
for Markdown that GitHub renders (markdown.py), names listed in a sentence (words.py)."""
