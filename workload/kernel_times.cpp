// One micro-batch's compute by kernel class: the classes by name, their sum, and their sum over model chunks.
#include "workload/workload.hpp"

namespace spansim::workload {

std::array<std::pair<std::string_view, double>, 11> KernelTimes::named() const
{
  return {{{"gemm", gemm},
           {"grouped_gemm", grouped_gemm},
           {"wgrad", wgrad},
           {"expert_wgrad", expert_wgrad},
           {"quantize", quantize},
           {"attention", attention},
           {"permute", permute},
           {"norms", norms},
           {"elementwise", elementwise},
           {"recompute", recompute},
           {"kernel_gaps", kernel_gaps}}};
}

double KernelTimes::total() const
{
  double sum = 0;
  for (const auto& [name, seconds] : named())
    sum += seconds;
  return sum;
}

KernelTimes& KernelTimes::operator+=(const KernelTimes& o)
{
  gemm += o.gemm;
  grouped_gemm += o.grouped_gemm;
  wgrad += o.wgrad;
  expert_wgrad += o.expert_wgrad;
  quantize += o.quantize;
  attention += o.attention;
  permute += o.permute;
  norms += o.norms;
  elementwise += o.elementwise;
  recompute += o.recompute;
  kernel_gaps += o.kernel_gaps;
  return *this;
}

} // namespace spansim::workload
