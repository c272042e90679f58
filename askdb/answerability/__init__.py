"""Schema-relevance answerability: is a question answerable from this source's tables?

`model` (pure numpy: encoder, combiner, threshold), `data` (training data from
the catalog and library; the training and evaluation services), `store` (versioned models on
disk) and `scorer` (the runtime API: `get_scorer(source).score(question)`).
"""
