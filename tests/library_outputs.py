"""What a library computed with an import fixture (tools/make_import_fixtures.py writes it as JSON: 'src', the
sources; 'pieces_in', the pieces it cut them into; 'beam<k>', its outputs, each with its 'pieces'), read against an
imported model's translator."""

import json

from jaxnat.data.vocab import BOS_ID, EOS_ID


def read_outputs(translator, path: str, beams: tuple) -> tuple[dict, list, dict]:
    """(the JSON, the sources as the translator encodes them, {k: the target ids of each beam-k output}); the sources
    checked to be cut into the library's pieces."""
    with open(path, encoding="utf-8") as f:
        want = json.load(f)
    tok = translator.tokenizer
    src, _ = translator.encode(want["src"])
    assert [[tok.id_to_piece(int(i), "src") for i in s if i not in (BOS_ID, EOS_ID)] for s in src] == [
        p.split() for p in want["pieces_in"]]
    ids = {beam: [[tok.piece_id(p, "tgt") for p in h["pieces"]] for h in want[f"beam{beam}"]] for beam in beams}
    return want, src, ids
