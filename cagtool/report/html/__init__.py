"""The self-contained HTML report (`cagtool report`, and report.html after `cagtool run`).

`document.write_report(run_path, out)` is the entry point. Content comes from the analyses the
text commands use (compare/, recompiles/, graphs/, gate/, frames), gathered as plain data
(`sections.py`) and laid out by jinja2 templates (`templates/`, autoescaped: `templating.py`); charts are Vega-Lite specs
written as plain dicts (`charts.py`: the JSON altair made for them; neither pandas nor altair is
imported) and drawn by the Vega JavaScript bundled into the page once (`vega_bundle.py`), graph
code highlighted as pygments highlights it (`highlight.py`), so the file opens offline and asks no
host for anything.
"""
