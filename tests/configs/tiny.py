"""A tiny AR config for tests: trains in seconds on the CPU."""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(d_model=32, ffn_dim=64, num_heads=2, enc_layers=1, dec_layers=1, dropout=0.1, max_len=64)
    c.data.update(source="synthetic", synthetic_train=1500, synthetic_valid=40, synthetic_test=40,
                  vocab_size=200, byte_fallback=False, max_len=48, batch_tokens=512,
                  bucket_growth=2.0, bucket_multiple=16)  # 3 shapes: little compiling
    c.train.update(steps=24, lr=2e-3, warmup_steps=10, log_every=4, eval_every=12, checkpoint_every=4,
                   valid_bleu_sentences=20)
    c.train.peak_tflops = 0.1  # a CPU core's order of magnitude: no second of matmuls at every run's start
    c.train.plot_curves = False  # a second of matplotlib per run; the tests of curves.png ask for it
    # throughput measured at the evaluation batch size: one batch size, fewer programs to compile
    c.eval.update(beam_size=2, latency_sentences=4, throughput_batch=16, batch_size=16)
    return c
