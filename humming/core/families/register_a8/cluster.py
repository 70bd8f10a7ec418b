"""The wide register-A W4A8 form's cluster option (RegisterA8Tiles.cluster = 2): two blocks, adjacent channel tiles of one
token tile, take turns multicasting each stage's activations into both blocks' slots (the pair's mechanism, shared
with the W4A16 form, in humming.core.families.register_a.pair_cluster): the pieces the wide kernel's slots take."""
from __future__ import annotations

from humming.core.families.register_a import pair_cluster

# lane 0's release of slot s in a pair (wide_loop.RELEASE's slots): both blocks' EMPTY barriers, for the stages that
# are refilled only (no block arrives on a peer that may have exited); written at the quarter loop's indentation
RELEASE = {"release_guard": " && kt + STAGES < ktiles",
           "release_arrive": ("  // (the last STAGES stages are not refilled)\n"
                              "      fence_proxy_async_smem();\n"
                              "      mbar_arrive_peer(xbar0 + 8 * (STAGES + s), 0);\n"
                              "      mbar_arrive_peer(xbar0 + 8 * (STAGES + s), 1);\n"
                              "    ")}

# the producer's tensor copy of a stage's activations (producer._LOOP's default), the pair's multicast
ACTIVATION_COPY = pair_cluster.multicast_copy("tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);")

# the pair's EMPTY barriers (both blocks' consumer warps) and the cluster barrier after their initialisation: the wide
# kernel's empty_init and init_barrier slots
BARRIERS = pair_cluster.BARRIERS
