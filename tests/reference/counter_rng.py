"""sonde's counter-based uniform draws, re-implemented from docs/generation.md ("Seeds and the
counter-based RNG"), never imported from sonde: the reference scripts of the seeded goldens
(make_block_goldens.py, fast_dllm_v2_reference.py) draw with it."""

TOKEN = 1   # the stream word of a token choice (`Token`)
REVEAL = 2  # origin's per-slot coin (`Reveal`)


def mix64(z):
    """splitmix64's finaliser (the documented one: add the golden gamma, two xor-shift-multiplies)."""
    M = (1 << 64) - 1
    z = (z + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def counter_uniform(seed, step, slot, stream):
    """splitmix64 finalisers chained over (seed, stream, step, slot), the top 53 bits of the result
    scaled to [0, 1)."""
    h = mix64(seed)
    for w in (stream, step, slot):
        h = mix64(h ^ w)
    return (h >> 11) * 2.0 ** -53
