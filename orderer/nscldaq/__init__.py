"""NSCLDAQ's data formats: ring items in (``evb send --nscldaq``), event-builder fragments out
(``evb tail --nscldaq``), and the layouts the Spark job writes built events with.

The layouts and constants live once, in :mod:`orderer.nscldaq.format`; the facts behind them
(taken from NSCLDAQ's own headers and its orderer) are in docs/nscldaq.md.
"""
