"""The NVIDIA backend: spells every device helper the generated kernels call in PTX.

Which spelling is used comes from the profile's declarations (an MMA shape that is declared, a
memory feature that is declared), never from an architecture number. The spellings live in one module per
instruction family (common, mma_sync, wgmma, wgmma_rs, tma, cluster, tcgen05, convert, actquant_spelling); this
class is the contract (``humming.devices.base.Backend``): tables from a helper group's or a datum's name to the
function of its module that spells it.
"""
from __future__ import annotations

from humming.devices.base import Backend, CompileRoute, HelperRequest
from humming.devices.nvidia import actquant_spelling, cluster, convert, mma_sync, tcgen05, tma, wgmma, wgmma_rs


class NvidiaBackend(Backend):
    name = "nvidia"

    # kernel preludes, f(backend, request, **params): the backend is the one whose ``prelude`` a group extends (a
    # CUDA-compatible backend spelling a group with these tables passes itself, see ``spell``)
    PRELUDES = {
        "stream_bulk": tma.stream_bulk_prelude,                      # the stream kernel with bulk copies
        "blockscaled": mma_sync.blockscaled_prelude,                 # scale_vec
        "wgmma_k32": wgmma.wgmma_prelude,                            # n
        "wgmma_wna16": wgmma.wgmma_wna16_prelude,                    # n
        "wgmma_w4a8": wgmma.wgmma_w4a8_prelude,                      # n
        "wgmma_ws": wgmma.wgmma_ws_prelude,                          # n
        "wgmma_rs": wgmma_rs.wgmma_rs_prelude,                       # n, tensor_copy, consumer_threads, ...
        "wgmma_rs8": wgmma_rs.wgmma_rs8_prelude,                     # n, producer, weights_by_bulk, ...
        "tcgen05": tcgen05.tcgen05_prelude,                          # acc
        "tcgen05_wna16": tcgen05.tcgen05_wna16_prelude,
        "tcgen05_blockscaled": tcgen05.tcgen05_blockscaled_prelude,  # scale_vec
    }
    # helper groups added to a prelude, f(**params), spelled from the profile alone (caps=...)
    GROUPS = {
        "tensor_copy": tma.tensor_copy_helpers,                # caps, mbarriers
        "cluster_dsmem": cluster.cluster_dsmem_helpers,        # caps
        "cluster_multicast": cluster.cluster_multicast_helpers,  # caps
        "grid_dependency": cluster.grid_dependency_helpers,    # caps
        "stmatrix": wgmma.stmatrix_helpers,                    # caps
        "e4m3_of_labels": convert.e4m3_of_labels_helpers,
        "actquant": actquant_spelling.actquant_helpers,        # fmt (a humming.formats Format), caps
        "actquant_encoder": actquant_spelling.encoder_description,  # fmt, caps
        "elementwise": actquant_spelling.elementwise_helpers,  # caps
    }
    # spelling data a generator reads to write code, f(**params)
    DATA = {
        "rs8_widen_tables": convert.rs8_widen_tables,
        "tcgen05_idesc": tcgen05.tcgen05_idesc,                            # kind, a_type, b_type, acc, m, n
        "tcgen05_idesc_block_scaled": tcgen05.tcgen05_idesc_block_scaled,  # ..., scale_format, m, n, sfa_id, sfb_id
    }

    def supports(self, caps) -> bool:
        return caps.backend == "nvidia"

    def compile_route(self, caps) -> CompileRoute:
        return CompileRoute(
            compiler="nvrtc",
            arch=caps.target.arch,
            min_nvrtc=tuple(caps.target.min_nvrtc) if caps.target.min_nvrtc else None,
            reason=f"NVRTC to CUBIN for {caps.target.arch} (the profile's target)",
        )

    def prelude(self, request: HelperRequest) -> str:
        return mma_sync.mma_sync_prelude(request)

    def helpers(self, name: str, request: HelperRequest | None = None, **params) -> str:
        return self.spell(self, name, request, **params)

    def data(self, name: str, **params):
        if name in self.DATA:
            return self.DATA[name](**params)
        return super().data(name, **params)

    @classmethod
    def spell(cls, backend: Backend, name: str, request: HelperRequest | None = None, **params) -> str:
        """Helper group ``name`` spelled by these tables for ``backend`` (self, or a CUDA-compatible backend that
        offers the group with the NVIDIA spelling around its own prelude); UnsupportedOnDevice for any other name."""
        if name in cls.PRELUDES:
            return cls.PRELUDES[name](backend, request, **params)
        if name in cls.GROUPS:
            return cls.GROUPS[name](**params)
        return Backend.helpers(backend, name, request, **params)
