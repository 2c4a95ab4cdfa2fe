"""Memory stays flat over many calls: each call's arrays are freed with them."""

import gc

import sonde


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_rss_flat_over_1000_calls(models):
    model = sonde.Model(models["qwen2"])
    text = "memory stays flat " * 8
    for _ in range(100):  # warm up: plans, buffer pools, allocator arenas
        logits, cache = model.run_with_cache(text, hooks="blocks.*.hook_resid_post")
    gc.collect()
    before = rss_kb()
    per_call = logits.nbytes + sum(a.nbytes for a in cache.items() and cache._arrays.values())
    for _ in range(1000):
        logits, cache = model.run_with_cache(text, hooks="blocks.*.hook_resid_post")
    gc.collect()
    grown = rss_kb() - before
    # A leak of one call's arrays per call would be 1000 * per_call (about 100 MB here); the bound
    # is a generous 20 MB for allocator noise.
    assert 1000 * per_call > 50 * 1024 * 1024
    assert grown < 20 * 1024, f"RSS grew {grown} kB over 1000 calls ({per_call} bytes per call)"
