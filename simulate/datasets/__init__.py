"""The evaluation sets chorus ships (TruthfulQA, MMLU, PubMedQA, StrategyQA, BoolQ; each folder with
its SOURCE.md and licence) and one loader per set; the ArgLLMs claim sets are optional inputs.

    from chorus.simulate.datasets import load
    loaded = load("mmlu", subjects=["anatomy"])          # shipped data
    loaded = load("truthfulclaim", data_dir="/data")      # a folder of your own
    loaded.records[0].question, loaded.records[0].gold, loaded.excluded
"""
from chorus.simulate.datasets.loaders import (ENV, LOADERS, SETS, SHIPPED, DataError, Loaded, MissingSet, Record, load,
                                       resolve_root)

__all__ = ["load", "resolve_root", "Record", "Loaded", "DataError", "MissingSet", "LOADERS", "SETS", "SHIPPED", "ENV"]
