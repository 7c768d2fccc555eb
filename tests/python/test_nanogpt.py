"""nanoGPT's weights in and out: a small GPT written here in numpy, with nanoGPT's names and its forward
(model.py's GPT at eval: learned positions, pre-norm blocks, exact GELU, causal softmax attention), gives
the logits attnlab's causal LM gives with the same weights, for biases on and off and tied or untied
heads; the weights come back out under the same names."""
import math

import numpy as np
import pytest

import attnlab

N_LAYER, N_HEAD, N_EMBD = 2, 2, 16


def config(bias, tied):
    return {"task": {"name": "copy", "length": 5, "symbols": 7},
            "model": {"kind": "causal_lm", "d_model": N_EMBD, "n_heads": N_HEAD, "n_layers": N_LAYER, "bias": bias,
                      "tie_embeddings": tied}}


def nanogpt_weights(vocab, block_size, bias, tied, seed=0):
    """A GPT's state_dict as nanoGPT names it, random (N(0, 0.02) as nanoGPT starts, norms around 1)."""
    rng = np.random.default_rng(seed)
    w = {}

    def linear(name, n_out, n_in):
        w[name + ".weight"] = rng.normal(0, 0.02, (n_out, n_in))
        if bias:
            w[name + ".bias"] = rng.normal(0, 0.02, n_out)

    def norm(name):
        w[name + ".weight"] = 1 + rng.normal(0, 0.1, N_EMBD)
        if bias:
            w[name + ".bias"] = rng.normal(0, 0.1, N_EMBD)

    w["transformer.wte.weight"] = rng.normal(0, 0.02, (vocab, N_EMBD))
    w["transformer.wpe.weight"] = rng.normal(0, 0.02, (block_size, N_EMBD))
    for l in range(N_LAYER):
        h = f"transformer.h.{l}."
        norm(h + "ln_1")
        linear(h + "attn.c_attn", 3 * N_EMBD, N_EMBD)
        linear(h + "attn.c_proj", N_EMBD, N_EMBD)
        w[h + "attn.bias"] = np.tril(np.ones((block_size, block_size))).reshape(1, 1, block_size, block_size)  # the mask buffer
        norm(h + "ln_2")
        linear(h + "mlp.c_fc", 4 * N_EMBD, N_EMBD)
        linear(h + "mlp.c_proj", N_EMBD, 4 * N_EMBD)
    norm("transformer.ln_f")
    w["lm_head.weight"] = w["transformer.wte.weight"] if tied else rng.normal(0, 0.02, (vocab, N_EMBD))
    return {k: v.astype(np.float32) for k, v in w.items()}


def nanogpt_forward(w, idx, bias):
    """nanoGPT's GPT.forward (eval, all positions), in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    b, t = idx.shape
    hs = N_EMBD // N_HEAD
    erf = np.vectorize(math.erf)

    def ln(x, p):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        y = (x - mean) / np.sqrt(var + 1e-5) * w[p + ".weight"]
        return y + w[p + ".bias"] if bias else y

    def linear(x, p):
        y = x @ w[p + ".weight"].T
        return y + w[p + ".bias"] if bias else y

    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][:t]
    for l in range(N_LAYER):
        h = f"transformer.h.{l}."
        q, k, v = np.split(linear(ln(x, h + "ln_1"), h + "attn.c_attn"), 3, axis=-1)
        q, k, v = (a.reshape(b, t, N_HEAD, hs).transpose(0, 2, 1, 3) for a in (q, k, v))
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)
        att = np.where(np.tril(np.ones((t, t))) == 1, att, -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, N_EMBD)
        x = x + linear(y, h + "attn.c_proj")
        hidden = linear(ln(x, h + "ln_2"), h + "mlp.c_fc")
        x = x + linear(0.5 * hidden * (1 + erf(hidden / math.sqrt(2))), h + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["lm_head.weight"].T


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tied", [True, False])
def test_imported_weights_give_nanogpts_logits(bias, tied):
    shape = attnlab.Model.from_config(config(bias, tied))
    vocab, block = shape.data.vocab_size, shape.state_dict()["body.pos.table"].shape[0]
    weights = nanogpt_weights(vocab, block + 4, bias, tied)  # nanoGPT's block_size may be longer than the task's
    model = attnlab.Model.from_nanogpt(weights, config(bias, tied))
    ids = shape.data.held_out(8)["input"]
    np.testing.assert_allclose(model(ids), nanogpt_forward(weights, ids, bias), rtol=1e-4, atol=1e-5)
    back = model.to_nanogpt()
    assert sorted(back) == sorted(k for k in weights if not k.endswith(".attn.bias"))
    for name, value in back.items():
        expected = weights[name][:block] if name == "transformer.wpe.weight" else weights[name]
        assert np.array_equal(value, expected), name


def test_weights_that_do_not_fit_are_named():
    vocab_model = attnlab.Model.from_config(config(True, False))
    weights = nanogpt_weights(vocab_model.data.vocab_size, 32, True, False)
    missing = dict(weights)
    del missing["transformer.h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match=r"missing: transformer.h.1.mlp.c_fc.bias \[64\]"):
        attnlab.Model.from_nanogpt(missing, config(True, False))
    with pytest.raises(ValueError, match=r"transformer.wte.weight: given \[3, 16\], the model has"):
        attnlab.Model.from_nanogpt({**weights, "transformer.wte.weight": weights["transformer.wte.weight"][:3]}, config(True, False))
    with pytest.raises(ValueError, match="unexpected: transformer.h.2.ln_1.weight"):
        attnlab.Model.from_nanogpt({**weights, "transformer.h.2.ln_1.weight": weights["transformer.ln_f.weight"]}, config(True, False))
    untied = nanogpt_weights(vocab_model.data.vocab_size, 32, True, False)  # lm_head.weight of its own
    with pytest.raises(ValueError, match="lm_head.weight differs from transformer.wte.weight, but this model ties them"):
        attnlab.Model.from_nanogpt(untied, config(True, True))
    tagger = {**config(True, False), "model": {**config(True, False)["model"], "kind": "token_tagger"}}
    del tagger["model"]["tie_embeddings"]
    with pytest.raises(ValueError, match="use model.kind causal_lm"):
        attnlab.Model.from_nanogpt(weights, tagger)
    # What the weights do not show (found in review: any kernel loaded, and its logits were not nanoGPT's).
    for override, message in [("model.attention.name=linear", "nanoGPT's attention is softmax over every earlier token: this model's is linear"),
                              ("model.attention.options={scale: 0.5}", "scales scores by 1/sqrt"),
                              ("model.activation=relu", "nanoGPT's MLP is GELU")]:
        with pytest.raises(ValueError, match=message):
            attnlab.Model.from_nanogpt(weights, config(True, False), [override])
        with pytest.raises(ValueError, match=message):
            attnlab.Model.from_config(config(True, False), [override]).to_nanogpt()
