"""NVIDIA Warp's public names, by topic, and what ``adjoint.warp`` does with each.

``GROUPS`` lists every name of Warp's namespace a program may write as ``wp.<name>``
(the top-level API and the kernel builtins of Warp's language reference, Warp 1.x),
each under one topic. A topic says why a name of it that ``adjoint.warp`` does not
define is refused; whether a name is supported is read from the namespace itself
(``status``), so the table in docs/from-warp.md (``<!-- warp table -->``, rendered by
docs/gen_stages.py from ``markdown_table``) cannot go stale: defining a name moves it
to "supported", and tests/warp/test_warp_namespace.py checks that every name is listed once.

Expects: nothing of the rest of adjoint.warp (``status`` takes the namespace's dict).
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """Warp names of one topic; ``missing``: why one adjoint.warp does not define is
    refused (the error's text)."""
    topic: str
    missing: str
    names: tuple


def _g(topic, missing, names):
    return Group(topic, missing, tuple(names.split()))


NOT_YET = "not in adjoint yet (issue 38)"

GROUPS = (
    _g("kernels and funcs", "a kind of kernel or func adjoint does not have",
       "kernel func func_grad func_native func_replay struct overload static tid Kernel "
       "Function constant grad adjoint"),
    _g("arrays", "an array kind adjoint does not have (adjoint's arrays are dense and "
                 "C-contiguous)",
       "array array1d array2d array3d array4d zeros zeros_like ones ones_like full full_like "
       "empty empty_like clone copy from_numpy fixedarray indexedarray indexedarray1d "
       "indexedarray2d indexedarray3d indexedarray4d fabricarray fabricarrayarray "
       "indexedfabricarray indexedfabricarrayarray from_ptr from_ipc_handle view address "
       "address_of array_store indexref ref load store handle"),
    _g("launches and tapes", "a launch feature adjoint does not have",
       "launch Tape Launch launch_tiled autograd"),
    _g("scalar types", "a scalar type adjoint's kernels do not take (float32, float64, "
                       "int8, int16, int32, int64, uint8, uint16, uint32, uint64 and bool "
                       "only; float16 arrays)",
       "float32 float64 int32 int64 bool float16 bfloat16 int8 int16 uint8 uint16 uint32 "
       "uint64 Float Int Scalar dtype_from_numpy dtype_to_numpy"),
    _g("vector, matrix, quaternion and transform types",
       "a vector type adjoint does not have (vectors, matrices, quaternions and transforms "
       "hold float32 or float64: no float16, no ints)",
       "vec2 vec3 vec4 vec2f vec3f vec4f vec2d vec3d vec4d mat22 mat33 mat44 mat22f mat33f "
       "mat44f mat22d mat33d mat44d quat quatf quatd transform transformf transformd "
       "vec2h vec3h vec4h mat22h mat33h mat44h quath transformh "
       "vec2b vec3b vec4b vec2ub vec3ub vec4ub vec2s vec3s vec4s vec2us vec3us vec4us "
       "vec2i vec3i vec4i vec2ui vec3ui vec4ui vec2l vec3l vec4l vec2ul vec3ul vec4ul "
       "vector matrix quaternion transformation matrix_from_cols matrix_from_rows"),
    _g("spatial math", "float16 spatial vectors and matrices are not supported (they hold "
                       "float32 or float64)",
       "spatial_vector spatial_vectorf spatial_vectord spatial_vectorh spatial_matrix "
       "spatial_matrixf spatial_matrixd spatial_matrixh spatial_adjoint spatial_bottom "
       "spatial_cross spatial_cross_dual spatial_dot spatial_top velocity_at_point "
       "transform_twist transform_wrench"),
    _g("scalar math", "a math function " + NOT_YET,
       "abs acos asin atan atan2 cbrt ceil clamp copysign cos cosh degrees erf erfc exp "
       "floor frac isfinite isinf isnan lerp log log10 log2 max min pow radians rint round "
       "sign sin sinh smoothstep sqrt step tan tanh trunc div mod floordiv erfinv erfcinv "
       "add sub mul neg pos unot select where div_approx inverse_approx"),
    _g("vector and matrix math", "a vector builtin " + NOT_YET,
       "dot cross length length_sq normalize outer transpose determinant inverse trace diag "
       "get_diag skew cw_mul cw_div identity ddot argmin argmax norm_l1 norm_l2 norm_huber "
       "norm_pseudo_huber smooth_normalize nonzero index qr3 eig3 svd2 svd3 dense_chol "
       "dense_chol_batched "
       "dense_gemm dense_gemm_batched dense_solve dense_solve_batched dense_subs "
       "lower_bound"),
    _g("quaternions and transforms", "a quaternion or transform builtin " + NOT_YET,
       "quat_identity quat_inverse quat_rotate quat_rotate_inv quat_from_axis_angle "
       "quat_to_matrix quat_from_matrix quat_between_vectors quat_from_euler quat_rpy "
       "quat_slerp quat_to_axis_angle quat_to_euler quat_to_rpy quat_twist "
       "quat_twist_angle quat_twist_angle_signed transform_identity transform_point "
       "transform_vector transform_multiply transform_inverse transform_get_translation "
       "transform_get_rotation transform_compose transform_decompose transform_expand "
       "transform_from_matrix transform_to_matrix transform_set_rotation "
       "transform_set_translation"),
    _g("atomics and bit operations", "atomic exchanges and bit_count are " + NOT_YET,
       "atomic_add atomic_sub atomic_min atomic_max atomic_and atomic_or atomic_xor "
       "atomic_cas atomic_exch bit_and bit_or bit_xor bit_count lshift rshift invert"),
    _g("constants", "a constant " + NOT_YET,
       "pi e inf nan tau phi half_pi ln2 ln10 log2e log10e PI E INF NAN TAU PHI HALF_PI "
       "LN2 LN10 LOG2E LOG10E"),
    _g("random numbers and noise", "random numbers in kernels (Warp's per-thread PCG "
                                   "state) are " + NOT_YET,
       "rand_init randi randf randu randn poisson noise pnoise curlnoise sample_cdf "
       "sample_triangle sample_unit_cube sample_unit_disk sample_unit_hemisphere "
       "sample_unit_hemisphere_surface sample_unit_ring sample_unit_sphere "
       "sample_unit_sphere_surface sample_unit_square"),
    _g("meshes, BVHs and geometry queries", "meshes, BVHs and geometric queries are not "
                                            "supported: adjoint has no acceleration "
                                            "structures",
       "Mesh MeshQuery MeshQueryAABB MeshQueryAABBTiled MeshQueryPoint MeshQueryRay Bvh "
       "BvhQuery BvhQueryTiled mesh_query_point mesh_query_point_no_sign "
       "mesh_query_point_sign_normal mesh_query_point_sign_parity "
       "mesh_query_point_sign_winding_number mesh_query_furthest_point_no_sign "
       "mesh_query_ray mesh_query_ray_anyhit mesh_query_ray_count_intersections "
       "mesh_query_aabb mesh_query_aabb_next mesh_query_aabb_tiled "
       "mesh_query_aabb_next_tiled mesh_query_next mesh_query_sphere mesh_eval_position "
       "mesh_eval_velocity mesh_eval_face_normal mesh_get mesh_get_bvh mesh_get_group_root "
       "mesh_get_index mesh_get_point mesh_get_velocity bvh_query_aabb bvh_query_aabb_tiled "
       "bvh_query_ray bvh_query_ray_tiled bvh_query_sphere bvh_query_capsule bvh_query_next "
       "bvh_query_next_tiled bvh_get_group_root closest_point_edge_edge intersect_tri_tri "
       "is_cubql_available geometry"),
    _g("hash grids", "hash grids are not supported: adjoint has no spatial hashing",
       "HashGrid HashGridQuery hash_grid_query hash_grid_query_next hash_grid_point_id"),
    _g("volumes", "sparse volumes (NanoVDB) are not supported",
       "Volume volume_index_to_world volume_index_to_world_dir volume_world_to_index "
       "volume_world_to_index_dir volume_lookup volume_lookup_f volume_lookup_i "
       "volume_lookup_v volume_lookup_index volume_sample volume_sample_f volume_sample_i "
       "volume_sample_v volume_sample_index volume_sample_grad volume_sample_grad_f "
       "volume_sample_grad_index volume_store volume_store_f volume_store_i volume_store_v "
       "volume_voxel_count"),
    _g("textures", "textures are not supported",
       "Texture Texture1D Texture2D Texture3D TextureAddressMode TextureFilterMode "
       "TextureResourceFlags texture_sample GLTextureResource RegisteredGLBuffer"),
    _g("tiles", "tiles (block-cooperative kernels) are not supported: an adjoint kernel "
                "is one thread's code",
       "tile tile_load tile_load_indexed tile_store tile_store_indexed tile_atomic_add "
       "tile_atomic_add_indexed tile_zeros tile_ones tile_full tile_empty tile_arange "
       "tile_from_thread untile tile_extract tile_view tile_assign tile_transpose "
       "tile_broadcast tile_reshape tile_squeeze tile_astype tile_sum tile_min tile_max "
       "tile_argmin tile_argmax tile_reduce tile_map tile_scan_inclusive "
       "tile_scan_exclusive tile_scan_max_inclusive tile_scan_min_inclusive tile_sort "
       "tile_matmul tile_fft tile_ifft tile_cholesky tile_cholesky_inplace "
       "tile_cholesky_solve tile_cholesky_solve_inplace tile_lower_solve "
       "tile_lower_solve_inplace tile_upper_solve tile_upper_solve_inplace tile_diag_add "
       "tile_axpy tile_dot tile_randf tile_randi tile_scatter_add tile_scatter_masked "
       "tile_slice_indexed tile_stack tile_stack_push tile_stack_pop tile_stack_clear "
       "tile_stack_count tile_query_valid tile_bvh_query_aabb tile_bvh_query_next "
       "tile_bvh_query_ray tile_mesh_query_aabb tile_mesh_query_aabb_next block_dim"),
    _g("CUDA graphs", "CUDA graph capture is not supported: adjoint launches its kernels "
                      "one by one and has no graph to capture or replay",
       "ScopedCapture capture_begin capture_end capture_launch capture_if capture_while "
       "capture_save capture_load capture_load_from_bytes capture_debug_dot_print Graph "
       "CaptureMode is_conditional_graph_supported"),
    _g("streams and events", "CUDA streams and events are not supported: adjoint's "
                             "launches use numba's default stream",
       "Stream ScopedStream get_stream set_stream synchronize_stream Event record_event "
       "wait_event wait_stream synchronize_event get_event_elapsed_time "
       "event_from_ipc_handle"),
    _g("devices", "a CUDA device query adjoint does not answer",
       "Device DeviceLike init get_device get_devices set_device ScopedDevice "
       "get_preferred_device is_cpu_available is_cuda_available is_device_available "
       "get_cuda_device get_cuda_devices get_cuda_device_count synchronize "
       "synchronize_device get_cuda_driver_version get_cuda_toolkit_version "
       "get_cuda_supported_archs get_cuda_max_cluster_dim get_cuda_kernel_properties "
       "get_suggested_block_size map_cuda_device unmap_cuda_device can_access "
       "ScopedPeerAccess is_peer_access_supported is_peer_access_enabled "
       "set_peer_access_enabled"),
    _g("memory", "an allocator or memory-pool control adjoint does not have (numba "
                 "allocates its arrays)",
       "is_mempool_supported is_mempool_enabled set_mempool_enabled "
       "get_mempool_release_threshold set_mempool_release_threshold "
       "get_mempool_used_mem_current get_mempool_used_mem_high is_mempool_access_supported "
       "is_mempool_access_enabled set_mempool_access_enabled ScopedMempool "
       "ScopedMempoolAccess Allocator CudaManagedAllocator ScopedAllocator "
       "get_device_allocator set_device_allocator set_cuda_allocator ScopedMemoryTracker "
       "print_memory_report MemoryKind"),
    _g("modules and compilation", "Warp's module and compilation controls have no "
                                  "adjoint counterpart",
       "config set_module_options get_module_options Module ModuleBuildOptions "
       "get_module load_module force_load clear_kernel_cache clear_lto_cache "
       "get_cpu_kernel_cache_key compile_aot_module load_aot_module build_experimental "
       "DeterministicMode WarpDeterminismError"),
    _g("timing, logging and diagnostics", "a profiling or logging tool adjoint does not "
                                          "have",
       "ScopedTimer timing_begin timing_end timing_print TimingResult TIMING_ALL "
       "TIMING_GRAPH TIMING_KERNEL TIMING_KERNEL_BUILTIN TIMING_MEMCPY TIMING_MEMSET "
       "ScopedCudaProfiler cuda_profiler_start cuda_profiler_stop Logger get_logger "
       "set_logger ScopedLogger ScopedLogLevel LOG_DEBUG LOG_INFO LOG_WARNING LOG_ERROR "
       "print_diagnostics printf breakpoint expect_eq expect_neq expect_near"),
    _g("errors", "an error class adjoint does not raise",
       "WarpCodegenError WarpCodegenAttributeError WarpCodegenIndexError "
       "WarpCodegenKeyError WarpCodegenTypeError WarpCodegenValueError"),
    _g("interoperability", "interop with other frameworks goes through adjoint's own "
                           "(adjoint.torch; ad.array(tensor, copy=False) shares a CPU "
                           "tensor's memory)",
       "from_torch to_torch device_from_torch device_to_torch dtype_from_torch "
       "dtype_to_torch stream_from_torch stream_to_torch from_jax to_jax device_from_jax "
       "device_to_jax dtype_from_jax dtype_to_jax jax_kernel jax_callable "
       "clear_jax_callable_graph_cache JaxCallableGraphMode JaxModulePreloadMode "
       "from_paddle to_paddle device_from_paddle device_to_paddle dtype_from_paddle "
       "dtype_to_paddle stream_from_paddle from_dlpack to_dlpack map"),
    _g("submodules", "a Warp subpackage adjoint does not have",
       "optim sim render fem sparse utils types examples tests"),
)

# names refused for a reason of their own (their topic's is too general)
SPECIFIC = {
    "adjoint": "Warp's custom gradients accumulate with wp.adjoint[x] += ...; adjoint's "
               "@wp.func_grad returns the adjoints instead (def g(<f's params>, adj_ret): "
               "return adj_x, adj_y)",
    "static": "wp.static evaluates an expression when the kernel is compiled (and unrolls "
              "loops with it); adjoint has no compile-time evaluation yet, and needs no "
              "unrolling for exact loop gradients",
    "func_native": "a func written in CUDA C++ or C++ cannot run on adjoint's backends "
                   "(numba, plain Python)",
    "func_replay": "a custom replay function is " + NOT_YET,
    "overload": "adjoint's funcs are not overloaded by argument types (a second @wp.func "
                "of one name replaces the first)",
    "printf": "write print(...) in kernels (forward only)",
    "grad": "Warp's wp.grad is " + NOT_YET + " (ad.grad is a different thing: the gradient "
            "of a func)",
    "bfloat16": "bfloat16 is not supported (numba has no bfloat16); store float32",
    "quaternion": "Warp's generic quaternion(dtype=...) is " + NOT_YET + ": write wp.quat "
                  "(float32) or wp.quatd",
    "transformation": "Warp's generic transformation(p, q, dtype=...) is " + NOT_YET +
                      ": write wp.transform (float32) or wp.transformd",
}

NAMES = tuple(n for g in GROUPS for n in g.names)
TOPIC = {n: g for g in GROUPS for n in g.names}


def status(name, namespace):
    """("supported", topic) when ``namespace`` (adjoint.warp's dict) defines ``name``, else
    ("refused", why); None for a name that is not Warp's."""
    group = TOPIC.get(name)
    if group is None:
        return None
    if name in namespace:
        return "supported", group.topic
    return "refused", group.missing


def rows(namespace):
    """[(topic, name, status, note)] for every Warp name, in ``GROUPS``' order; the note of
    a supported name is what ``NOTES`` says of it (how adjoint's meaning differs)."""
    out = []
    for g in GROUPS:
        for n in g.names:
            state, why = status(n, namespace)
            out.append((g.topic, n, state, NOTES.get(n, "") if state == "supported" else
                        SPECIFIC.get(n, why)))
    return out


def markdown_table(namespace):
    """The table docs/from-warp.md shows: one row per topic, its supported names and its
    refused names with the reason."""
    lines = ["| topic | supported | refused (`wp.<name>` raises `WarpNameError`) |",
             "| --- | --- | --- |"]
    for g in GROUPS:
        have = [n for n in g.names if n in namespace]
        lack = [n for n in g.names if n not in namespace]
        noted = [f"`{n}` ({NOTES[n]})" if n in NOTES else f"`{n}`" for n in have]
        plain = [n for n in lack if n not in SPECIFIC]
        own = [f"`{n}`: {SPECIFIC[n]}" for n in lack if n in SPECIFIC]
        refused = "; ".join(([", ".join(f"`{n}`" for n in plain) + f": {g.missing}"]
                             if plain else []) + own)
        lines.append(f"| {g.topic} | {', '.join(noted)} | {refused} |")
    count = sum(1 for n in NAMES if n in namespace)
    lines.append("")
    lines.append(f"{count} of Warp's {len(NAMES)} names are supported; the rest raise "
                 "`adjoint.warp.WarpNameError` naming the feature and the line using it.")
    return "\n".join(lines)


# How a supported name's meaning differs from Warp's (the table shows it)
NOTES = {
    "func_grad": "the adjoint returns the adjoints (a vector's as a vector); Warp's "
                 "`wp.adjoint[x] += ...` is refused",
    "float16": "arrays only, on the CPU: a launch computes in float32 on a float32 copy, "
               "rounded back (so are gradients); no float16 scalars, casts or vectors",
    "atomic_add": "returns the old value (also straight into a store or an expression) "
                  "where the backward does not need it and no gradient flows through it",
    "atomic_sub": "as `atomic_add`",
    "atomic_min": "as `atomic_add`; the gradient goes to the value that survived",
    "atomic_max": "as `atomic_min`",
    "atomic_and": "of int32, int64 and uint32 arrays; the old value as `atomic_add`'s",
    "atomic_or": "as `atomic_and`",
    "atomic_xor": "as `atomic_and`",
    "floor": "an int, as Python's `math.floor`; Warp's is a float",
    "ceil": "an int, as Python's `math.ceil`; Warp's is a float",
    "constant": "returns its argument",
    "init": "nothing to initialize",
    "config": "`verify_fp` is adjoint's; the other flags are kept and ignored",
    "set_module_options": "`enable_backward` applies to kernels defined after it",
    "ScopedTimer": "wall time; `synchronize=True` waits for CUDA launches",
    "launch": "`stream`, `max_blocks`, `block_dim` ignored; `record_cmd` refused",
    "synchronize": "waits for CUDA launches; nothing to wait for on the CPU",
    "autograd": "adjoint's `jacobian`, `jacobian_fd`, `gradcheck`",
    "optim": "`Adam` and `SGD`, without SGD's dampening, weight decay and Nesterov",
    "types": "`vector(length, dtype)`, `matrix(shape, dtype)` and the types of this namespace",
    "vector": "in plain Python, given only `length=` (and `dtype=`), the type "
              "(`wp.vector(length=6, dtype=float)` is `wp.spatial_vector`); in a kernel a "
              "value, as Warp's",
    "matrix": "in plain Python, given only `shape=` (and `dtype=`), the type; in a kernel a "
              "value, as Warp's",
    "get_mempool_release_threshold": "raises ValueError on the CPU, as Warp's",
    "get_mempool_used_mem_current": "raises ValueError on the CPU, as Warp's",
    "get_mempool_used_mem_high": "raises ValueError on the CPU, as Warp's",
    "WarpCodegenError": "adjoint's `TransformError`",
    "int8": "an array's dtype, a scalar's annotation and a cast: in a kernel an element is "
            "an int (64 bits) as loaded and wrapped to the type as stored",
    "int16": "as `int8`",
    "uint8": "as `int8`",
    "uint16": "as `int8`",
    "uint32": "as `int8`",
    "uint64": "held in a kernel as an int64 of the same bits: +, -, *, bit operations and "
              "<< wrap as Warp's do; a comparison, division, >> or float() of a value from "
              "2**63 on reads it as negative",
    "lshift": "on int64: `x << 40` does not wrap at 32 bits as Warp's int32 does",
    "where": "in kernels the ternary `a if cond else b`, with its derivative",
    "select": "Warp's older argument order (false first); in kernels the ternary",
    "quat_to_axis_angle": "also the form returning `(axis, angle)`",
    "Kernel": "adjoint's `Kernel` class",
    "Function": "adjoint's `Func` class",
}
