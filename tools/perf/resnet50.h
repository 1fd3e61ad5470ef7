// SPDX-License-Identifier: Apache-2.0
//
// The gradient tensors of ResNet-50 (torchvision layout, 25,557,032
// parameters in 161 tensors) and DDP's bucketing of them: buckets of at most
// 25 MiB filled in reverse registration order, as backward produces them.
#pragma once

#include <cstddef>
#include <vector>

namespace gsync::perf {

std::vector<size_t> resnet50_tensor_sizes();
// Element counts per bucket.
std::vector<size_t> ddp_buckets(const std::vector<size_t>& tensors, size_t cap_bytes,
                                size_t elem_bytes);

}  // namespace gsync::perf
