"""Plain-Python reference of an ARPA n-gram model's queries (`jaxnat.decoding.ngram`): the file read into dicts,
and log10 P(w | h) by the back-off rule, one word at a time."""

from __future__ import annotations


def read(path: str) -> dict:
    """{n-gram tuple of words: (log10 p, log10 back-off)} of an ARPA file, and its order under the key None."""
    grams, order, section = {}, 0, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip(" \t\r\n")
            if line.startswith("\\") and line.endswith("-grams:"):
                section = order = int(line[1:-len("-grams:")])
            elif section and line and not line.startswith("\\"):
                fields = line.split("\t")
                backoff = float(fields[2]) if len(fields) > 2 else 0.0
                grams[tuple(w for w in fields[1].split(" ") if w)] = (float(fields[0]), backoff)
    grams[None] = order
    return grams


def logp(grams: dict, context: tuple, word: str) -> float:
    """log10 P(word | context): the longest n-gram the model has, plus the back-offs of the longer contexts."""
    word = word if (word,) in grams else "<unk>"
    context = tuple(w if (w,) in grams else "<unk>" for w in context)[max(0, len(context) - grams[None] + 1):]
    if (word,) not in grams:  # a model without <unk>: KenLM's value
        return -100.0 + sum(grams.get(context[i:], (0, 0.0))[1] for i in range(len(context)))
    for i in range(len(context) + 1):
        if context[i:] + (word,) in grams:
            return grams[context[i:] + (word,)][0] + sum(grams.get(context[j:], (0, 0.0))[1] for j in range(i))
    raise AssertionError("a unigram is always found")


def sentence(grams: dict, words: list[str]) -> float:
    """log10 P of a sentence, from <s> and with </s>: KenLM's full score."""
    history, total = ("<s>",), 0.0
    for w in [*words, "</s>"]:
        total += logp(grams, history, w)
        history = history + (w,)
    return total
