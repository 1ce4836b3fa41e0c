"""The decode request: its starting hypotheses (a vectorised kernel) against a plain-Python reference on random
requests (empty, single-piece, full-capacity, all-PAD phrases, mixed soft/hard/init rows), the host-side
padding helpers, the translator's request shapes, and the one-line refusals of a model that cannot honour a
request."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID
from jaxnat.decoding.refine import start_from_request
from jaxnat.decoding.request import DecodeRequest, Supports, check_supported, pad_hypotheses, pad_phrases
from jaxnat.errors import DataError
from jaxnat.models import build_model, family_of

C, P = 3, 3
CAPACITY = C * P + 2  # room for every phrase at full length


def python_start(init, phrases, hard):
    """(tokens, phrase ids) of one sentence as lists without padding; phrase k (from 1) is the k-th given,
    empty ones included."""
    if init is not None:
        return init, [0] * len(init)
    tokens, marks = [BOS_ID], [0]
    for k, ph in enumerate(phrases or [], 1):
        tokens += ph
        marks += [k if hard else 0] * len(ph)
    return tokens + [EOS_ID], marks + [0]


piece = st.integers(NUM_RESERVED, 30)
sentence = st.one_of(
    st.tuples(st.lists(piece, max_size=CAPACITY - 2).map(lambda ids: [BOS_ID, *ids, EOS_ID]), st.none(),
              st.just(False)),
    st.tuples(st.none(), st.lists(st.lists(piece, max_size=P), max_size=C), st.booleans()),
    st.tuples(st.none(), st.none(), st.just(False)))


_start = jax.jit(start_from_request, static_argnums=1)  # one program a shape: eagerly, each op compiles its own


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(sentence, min_size=1, max_size=5), st.integers(0, 4))
def test_start_from_request_matches_python(sentences, slack):
    """At every capacity from the longest start (which may be less than C·P + 2) up."""
    if len(sentences) > 1:  # plain rows fill batches up to 5 rows: one compiled program a capacity, not a size too
        sentences = sentences + [(None, None, False)] * (5 - len(sentences))
    b = len(sentences)
    inits = [s[0] for s in sentences]
    init = None
    if any(i is not None for i in inits):
        init = np.full((b, CAPACITY), PAD_ID, np.int32)
        for r, row in enumerate(inits):
            if row is not None:
                init[r, :len(row)] = row
    constraints = np.full((b, C, P), PAD_ID, np.int32)
    for r, (_, phrases, _) in enumerate(sentences):
        for k, ph in enumerate(phrases or []):
            constraints[r, k, :len(ph)] = ph
    hard = np.array([s[2] for s in sentences])
    request = DecodeRequest(jnp.zeros((b, 4), jnp.int32), init, constraints, hard)
    want = [python_start(*s) for s in sentences]
    capacity = max([len(t) for t, _ in want] + [CAPACITY if init is not None else 0]) + slack
    got = jax.device_get(_start(request, capacity))  # on the host: indexing rows on device compiles per shape too
    for r, (tokens, marks) in enumerate(want):
        n = len(tokens)
        assert got.tokens[r].tolist() == tokens + [PAD_ID] * (capacity - n)
        assert got.phrase[r].tolist() == marks + [0] * (capacity - n)
        assert not np.asarray(got.scores[r]).any()


def test_plain_request_starts_empty_and_too_wide_init_is_refused():
    out = _start(DecodeRequest(jnp.zeros((2, 3), jnp.int32)), 5)
    assert out.tokens.tolist() == [[BOS_ID, EOS_ID, PAD_ID, PAD_ID, PAD_ID]] * 2
    with pytest.raises(ValueError, match="capacity"):
        _start(DecodeRequest(jnp.zeros((1, 3), jnp.int32), init=jnp.full((1, 8), 7)), 7)


def test_padding_helpers():
    assert pad_hypotheses([[7, 8], None], 5).tolist() == [[BOS_ID, 7, 8, EOS_ID, PAD_ID], [PAD_ID] * 5]
    out = pad_phrases([[[7], [8, 9, 10]], None, [[11, 12]]])
    assert out.shape == (3, 2, 3)
    assert out[0].tolist() == [[7, PAD_ID, PAD_ID], [8, 9, 10]] and not out[1].any()


@pytest.mark.parametrize("model, shared", [("levt", True), ("cmlm", False)])
def test_a_refining_models_requests_share_one_shape(model, shared):
    """`Translator.request`: a model that takes every kind of start gets plain, post-editing and constrained
    rows (phrases up to 8 pieces) in one request shape, so one compiled program; constraints are rounded up to
    multiples of 4 (a 9-piece phrase: 12). Any other model gets only what its rows ask for, and one that bounds the
    phrases a sentence (CMLM's placement, over the sets of phrases placed) their count to a power of two."""
    from jaxnat.decoding.translator import Start, Translator

    config = build_config("tests/configs/tiny.py", [f"--config.model.name={model}", "--config.eval.beam_size=1"])
    translator = Translator(build_model(config, 40, 40), None, None, config)
    src = np.zeros((2, 16), np.int32)

    def shapes(*starts):
        r = translator.request(src, list(starts), 1, False)
        return tuple(None if x is None else x.shape for x in (r.init, r.constraints, r.hard)), r.max_out

    plain = shapes(Start(), Start())
    if model == "levt":
        assert shapes(Start(init=[7] * 5), Start()) == plain
    assert (shapes(Start(phrases=[[7] * 8, [8]], hard=True), Start()) == plain) is shared
    assert shapes(Start(phrases=[[7] * 8] * 4), Start())[0][1] == (2, 4, 8)
    assert shapes(Start(phrases=[[7] * 9] * 5), Start())[0][1] == (2, 8, 12)
    if not shared:
        assert plain[0] == (None, None, None)
        assert [shapes(Start(phrases=[[7]] * n), Start())[0][1][1] for n in (1, 2, 3)] == [1, 2, 4]


def test_what_each_model_supports_is_checked_in_one_line():
    check_supported("levt", family_of("levt").supports, init=True, soft=True, hard=True, trace=True)
    check_supported("ar", family_of("ar").supports, hard=True, beam_size=4)  # constrained beam search
    for kwargs, what in [({"init": True}, "initial hypotheses"), ({"pairs": True}, "constraint pairs"),
                         ({"soft": True}, "soft constraints"), ({"trace": True}, "edit traces")]:
        with pytest.raises(DataError, match=f"model 'ar' does not take {what}"):
            check_supported("ar", family_of("ar").supports, **kwargs)
    with pytest.raises(DataError, match="model 'cmlm' does not take constraint pairs"):
        check_supported("cmlm", family_of("cmlm").supports, pairs=True)
    with pytest.raises(DataError, match="beam search"):
        check_supported("editor", family_of("editor").supports, beam_size=4)
    check_supported("x", Supports(beam=True), beam_size=4)


def test_a_hard_constraint_that_encodes_to_no_pieces_is_refused():
    """SentencePiece reads its own space mark "▁" as whitespace: such a hard constraint is an empty phrase, which
    the decoders would silently leave out of the output. It is refused in one line; as a soft constraint it is only
    a starting point and is kept (empty)."""
    from jaxnat.decoding.translator import Translator

    class Pieces:  # a tokenizer whose "▁" has no pieces (as a SentencePiece model's), every other phrase one
        def encode(self, texts, side):
            return [[] if text.strip("▁ ") == "" else [7] for text in texts]

        def unrepresentable(self, text, side):
            return []

    config = build_config("tests/configs/tiny.py", ["--config.model.name=levt", "--config.eval.beam_size=1"])
    translator = Translator(build_model(config, 40, 40), None, Pieces(), config)
    with pytest.raises(DataError, match=r"sentence 2: the hard constraint '▁' is no text to the model's vocabulary"):
        translator.starts(None, [["Hund"], ["Hund", "▁"]], [True, True])
    assert [s.phrases for s in translator.starts(None, [["Hund", "▁"]], [False])] == [[[7], []]]


def test_a_prefix_meets_the_hard_constraints_it_holds_and_must_fit_the_model():
    """A sentence's prefix (the start of its translation) meets each hard constraint it holds once, at positions no
    other met one took (`unmet`), and the search places the rest; a prefix the model could not hold, or that the
    vocabulary could only write as UNK, is refused in one line naming the sentence."""
    from jaxnat.decoding.translator import Translator, unmet

    assert unmet([[5], [6, 7], [5], [9]], [5, 6, 7, 8]) == [[5], [9]]  # one occurrence meets one phrase
    assert unmet([[6, 7], [7, 8]], [6, 7, 8]) == [[7, 8]]  # overlapping the one met before
    assert unmet([[3]], []) == [[3]] and unmet([], [3]) == []

    class Words:  # a tokenizer of one piece a word, which cannot write "€"
        def encode(self, texts, side):
            return [[10 + ord(w[0]) % 50 for w in text.split()] for text in texts]

        def unrepresentable(self, text, side):
            return [c for c in text if c == "€"]

        languages = ()

    config = build_config("tests/configs/tiny.py", ["--config.eval.beam_size=1"])
    translator = Translator(build_model(config, 80, 80), None, Words(), config)
    start = translator.starts(constraints=[["a b", "c"]], hard=[True], prefixes=["x a b "])[0]
    assert (start.given, start.phrases) == ([10 + ord("x") % 50, 10 + ord("a") % 50, 10 + ord("b") % 50],
                                            [[10 + ord("c") % 50]])
    with pytest.raises(DataError, match=r"^sentence 2: the prefix and constraint set have 63 target pieces, more "
                                        r"than the 62 the model can hold \(model.max_len 64"):
        translator.starts(constraints=[None, ["c"]], hard=[False, True], prefixes=[None, "w " * 62])
    with pytest.raises(DataError, match=r"^sentence 1: the prefix '5 €' has characters the model's vocabulary "
                                        r"cannot represent \(€\): the output would start with UNK$"):
        translator.starts(prefixes=["5 €"])
    config = build_config("tests/configs/tiny.py", ["--config.model.name=nat", "--config.eval.beam_size=1"])
    nat = Translator(build_model(config, 80, 80), None, Words(), config)
    with pytest.raises(DataError, match=r"^sentence 2: model 'nat' does not take target prefixes"):
        nat.starts(prefixes=[None, "ma"])  # a word typed in part alone


@pytest.mark.parametrize("pair", [("▁", "kelo"), ("dog", "▁")])
def test_a_constraint_pair_phrase_that_encodes_to_no_pieces_is_refused(pair):
    """A pair whose source phrase encodes to no pieces ("▁") was silently no pair (the model reads an empty source
    phrase as padding), one with such a target phrase a pair that asks for nothing; both are refused in one line."""
    from jaxnat.decoding.translator import Translator

    class Pieces:  # "▁" has no pieces (as in a SentencePiece model), every other phrase one
        def encode(self, texts, side):
            return [[] if text.strip("▁ ") == "" else [7] for text in texts]

    config = build_config("tests/configs/tiny.py", ["--config.model.name=vecconst", "--config.eval.beam_size=1",
                                                    "--config.data.pairs_dir=synthetic"])
    translator = Translator(build_model(config, 40, 40), None, Pieces(), config)
    with pytest.raises(DataError, match=r"sentence 2: the constraint pair phrase '▁' is no text .*: a pair needs both"):
        translator.starts(pairs=[[("dog", "kelo")], [pair]])


def test_constraint_pairs_with_characters_the_vocabulary_lacks_are_marked(caplog):
    """A vectorized-constraints model reads constraint pairs as input, like soft constraints: characters of either
    phrase that the vocabulary holds only as UNK mark the sentence "unknown_characters", as in the source."""
    from jaxnat.decoding.translator import Translator

    class Ascii:  # a closed alphabet: every character beyond ASCII is UNK; one piece a word
        languages = {}
        keeps_unknown = "nothing keeps them"

        def encode(self, texts, side):
            return [[7] * len(text.split()) for text in texts]

        def unrepresentable(self, text, side):
            return [c for c in dict.fromkeys(text) if ord(c) > 127]

        def decode(self, ids, side):
            return "x"

    config = build_config("tests/configs/tiny.py", ["--config.model.name=vecconst", "--config.eval.beam_size=1",
                                                    "--config.data.pairs_dir=synthetic"])
    translator = Translator(build_model(config, 40, 40), None, Ascii(), config)
    translator.translate_ids = lambda src, *args, **kwargs: [{"tokens": np.array([BOS_ID, 7, EOS_ID]), "score": 0.0}
                                                             for _ in src]
    outs = translator.translate(["the dog", "the dog", "the cat"], 1, 4,
                                pairs=[[("dög", "kélo")], [("dog", "кот")], None])
    assert [o.get("unknown_characters") for o in outs] == ["öé", "кот", None]
    # the warning says what would keep them as the vocabulary knows it (byte fallback is no advice for an import)
    assert "2 of 3 sentences have characters the vocabulary holds only as UNK" in caplog.text
    assert "nothing keeps them" in caplog.text


def test_a_source_of_max_len_minus_one_pieces_is_cut_and_the_warning_says_how_many_pieces_fit(caplog):
    """data.max_len counts BOS and EOS: a source of data.max_len - 1 pieces is cut to data.max_len - 2. The warning
    said it was "longer than data.max_len=48 pieces", which it was not; it names the pieces that fit."""
    from jaxnat.decoding.translator import Translator

    class Words:  # one piece a word, no languages
        languages = {}

        def encode(self, texts, side):
            return [[7] * len(text.split()) for text in texts]

        def unrepresentable(self, text, side):
            return []

        def decode(self, ids, side):
            return "x"

    config = build_config("tests/configs/tiny.py", [])
    translator = Translator(build_model(config, 40, 40), None, Words(), config)
    kept = []
    translator.translate_ids = lambda src, *args, **kwargs: kept.extend(len(s) for s in src) or [
        {"tokens": np.array([BOS_ID, EOS_ID]), "score": 0.0} for _ in src]
    max_len = config.data.max_len
    with caplog.at_level("WARNING", logger="jaxnat"):
        outs = translator.translate([" ".join(["w"] * (max_len - 2)), " ".join(["w"] * (max_len - 1))], 1, 4)
    assert kept == [max_len, max_len] and [o.get("source_truncated") for o in outs] == [None, True]
    assert (f"1 of 2 sources are longer than data.max_len={max_len} tokens with BOS and EOS ({max_len - 2} pieces)"
            in caplog.text)


@pytest.mark.parametrize("kwargs, message", [
    ({"texts": "the dog ."}, r"translate takes a list of texts, got str \(one sentence: \[text\]\)"),
    ({"texts": ["the dog .", None]}, r"texts\[1\] is NoneType, not a string"),
    ({"constraints": ["kelo", "lan"], "hard": [True, True]},
     r"constraints\[0\] must be a list of phrases \(strings\) or None, got 'kelo'"),
    ({"constraints": [["kelo"]], "hard": [True]},
     r"constraints takes None or a list of one entry per text \(2 texts\), got 1$"),
    ({"constraints": [["kelo"], ["lan"], ["x"]]}, r"constraints .* \(2 texts\), got 3$"),
    ({"constraints": [["kelo"], ["lan"]], "hard": True}, r"hard .* \(2 texts\), got a bool$"),
    ({"inits": ["kelo"]}, r"inits .* \(2 texts\), got 1$"),
    # a hypothesis as a list of words (or bytes) failed in the tokenizer with a TypeError
    ({"inits": [["kelo", "lan"], None]}, r"inits\[0\] must be a hypothesis to refine \(a string\) or None, got \["),
    ({"inits": [None, b"kelo"]}, r"inits\[1\] must be a hypothesis to refine \(a string\) or None, got b'kelo'$"),
    ({"beam_size": 2, "nbest": 3}, r"^an n-best list of 3 needs a beam of at least 3 \(beam size 2\): the search"),
    ({"prefixes": ["ein", ["Hund"]]}, r"prefixes\[1\] must be the start of a translation \(a string\) or None, got"),
])
def test_translate_refuses_arguments_of_the_wrong_shape_in_one_line(kwargs, message):
    """`Translator.translate` from Python: a string where a list is due would be read as its characters (garbage,
    silently), a list of another length than the texts cut short or fail deep in the batching; each is one line."""
    from jaxnat.decoding.translator import Translator

    config = build_config("tests/configs/tiny.py", [])
    translator = Translator(build_model(config, 40, 40), None, None, config)  # refused before anything is encoded
    kwargs = {"texts": ["the dog .", "the cat ."], **kwargs}
    with pytest.raises(DataError, match=message):
        translator.translate(**kwargs)


@pytest.mark.parametrize("args, message", [
    ((["kelo", "lan"], ["hard"]), r"constraints\[0\] must be a list of phrases \(strings\) or None, got 'kelo'"),
    (([["kelo"], ["lan"]], ["Hard"]), r"trace modes are 'soft' and 'hard', not 'Hard'"),
])
def test_the_edit_trace_refuses_arguments_of_the_wrong_shape_in_one_line(args, message):
    """`evaluate.trace_page` (the notebook's edit trace) decodes without `translate`: the same checks, and a mode
    other than soft or hard, which was traced as soft under its own name."""
    from jaxnat.decoding.translator import Translator
    from jaxnat.evaluate import trace_page

    config = build_config("tests/configs/tiny.py", ["--config.model.name=editor", "--config.eval.beam_size=1"])
    translator = Translator(build_model(config, 40, 40), None, None, config)  # refused before anything is encoded
    with pytest.raises(DataError, match=message):
        trace_page(translator, ["the dog .", "the cat ."], ["kelo .", "lan ."], *args)


def test_constraint_pairs_that_do_not_fit_are_refused_by_their_line_before_translating(tmp_path):
    """--mode translate checked each line's pairs (and hard constraints) only as its chunk was translated: a bad line
    of a long input stopped it after the chunks before it, naming "sentence N" of its chunk's non-blank lines, not
    the input line. Now the line, before anything is translated."""
    from jaxnat.decoding.translate_io import translate_stream
    from jaxnat.decoding.translator import Translator

    class Pieces:  # one piece a word
        def encode(self, texts, side):
            return [[7] * len(text.split()) for text in texts]

    config = build_config("tests/configs/tiny.py", ["--config.model.name=vecconst",
                                                    "--config.data.pairs_dir=synthetic"])
    translator = Translator(build_model(config, 40, 40), None, Pieces(), config)
    translator.translate = lambda *args, **kwargs: pytest.fail("translated")
    (tmp_path / "in.jsonl").write_text('\n{"src": "a dog .", "constraint_pairs": [["dog", "kelo"]]}\n'
                                       '{"src": "a cat .", "constraint_pairs": [["a", "b"], ["c", "d"], ["e", "f"], '
                                       '["g", "h"]]}\n')
    with pytest.raises(DataError, match=r"in.jsonl:3: 4 constraint pairs; the model takes at most data.max_pairs=3$"):
        translate_stream(lambda: translator, config, str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"),
                         chunk_lines=1)


def test_a_phrase_into_an_unspaced_language_starts_inside_the_clause():
    """SentencePiece encodes a phrase alone with the word boundary of a text's start ("▁" "北" "京"); placed inside
    a Chinese sentence that boundary would write a space. The target language decides (`inside_word`)."""
    from jaxnat.decoding.translator import Translator

    class Pieces:
        pieces = ["▁", "北", "京"]

        def encode(self, texts, side):
            return [[0, 1, 2] for _ in texts]

        def unrepresentable(self, text, side):
            return []

        def id_to_piece(self, i, side):
            return self.pieces[i]

        def piece_id(self, piece, side):
            return self.pieces.index(piece) if piece in self.pieces else None

    for lang, phrase in (("zh", [1, 2]), ("de", [0, 1, 2])):
        config = build_config("tests/configs/tiny.py", ["--config.model.name=levt", "--config.eval.beam_size=1",
                                                        f"--config.data.tgt_lang={lang}"])
        translator = Translator(build_model(config, 40, 40), None, Pieces(), config)
        assert [s.phrases for s in translator.starts(None, [["北京"]], [True])] == [[phrase]]
    # a multilingual model's request names its output language: that language's, not data.tgt_lang's
    assert [s.phrases for s in translator.starts(None, [["北京"]] * 2, [True] * 2, tgt_langs=["zho_Hans", None])] == [
        [[1, 2]], [[0, 1, 2]]]
    # and the translate command's check of each input line before anything is translated encodes it so too (it
    # took data.tgt_lang's: a phrase at the model's length limit was judged with a boundary piece it would not have)
    from jaxnat.decoding import translate_io

    checked = []
    start = translator.start
    translator.start = lambda *a, **kw: checked.append(start(*a, **kw).phrases)
    translate_io.check_capabilities([{"src": "x", "constraints": ["北京"], "hard": True, "tgt_lang": "zho_Hans"},
                                     {"src": "x", "constraints": ["北京"], "hard": True}], translator, "in")
    assert checked == [[[1, 2]], [[0, 1, 2]]]


def test_the_edit_trace_marks_the_pieces_a_constraint_into_chinese_is_placed_as():
    """The edit trace marked a constraint's pieces as encoded alone ("▁" "北" "京"), not as placed inside a Chinese
    clause ("北" "京"): every "▁" the model wrote was shown as a constraint piece, and a merged first piece ("▁北京"
    swapped for "北京") was not."""
    from jaxnat.decoding.translator import Translator
    from jaxnat.evaluate import trace_page

    class Pieces:
        pieces = {10: "▁", 11: "北", 12: "京"}
        languages = ()

        def encode(self, texts, side):
            return [[10, 11, 12] if t == "北京" else [10] for t in texts]

        def decode(self, ids, side):
            return "".join(self.pieces.get(int(i), "") for i in ids)

        def id_to_piece(self, i, side):
            return self.pieces.get(int(i), "?")

        def piece_id(self, piece, side):
            return {v: k for k, v in self.pieces.items()}.get(piece)

        def unrepresentable(self, text, side):
            return []

    config = build_config("tests/configs/tiny.py", ["--config.model.name=editor", "--config.eval.beam_size=1",
                                                    "--config.data.tgt_lang=zh"])
    translator = Translator(build_model(config, 40, 40), None, Pieces(), config)

    def translate_ids(src, beam_size, batch_size, starts=None, trace=False):  # a "▁" written before the start
        rows = [[BOS_ID, 10, *(s.pieces() if s else []), EOS_ID] for s in starts or [None] * len(src)]
        return [{"tokens": np.asarray(r), "iterations": 1, "trace": np.asarray([[r, r, r]])} for r in rows]

    translator.translate_ids = translate_ids
    page = trace_page(translator, ["Beijing"], None, [["北京"]], ["hard"])
    assert '<span class="p c">北</span><span class="p c">京</span>' in page
    assert '<span class="p c">▁</span>' not in page and '<span class="p">▁</span>' in page
