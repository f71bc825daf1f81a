// Order statistics. The largest of n draws is sampled in one draw: its CDF is F^n,
// so F^-1(u^(1/n)) has its distribution exactly; u^(1/n) is kept as its distance from 1 to stay precise at the
// n of 100K-GPU jobs.
#include "reliability/reliability.hpp"

#include <algorithm>
#include <cmath>

namespace spansim::reliability {

namespace {

// Acklam's rational approximation of the normal quantile (relative error 1.15e-9), refined by one Halley step.
double acklam(double p)
{
  constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                          1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
                          -1.328068155288572e+01};
  constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                          -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double low = 0.02425;
  double x             = 0;
  if (p < low) {
    const double q = std::sqrt(-2 * std::log(p));
    x              = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - low) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log1p(-p));
    x              = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  return x;
}

double halley(double x, double p)
{
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

} // namespace

double normal_quantile(double p)
{
  if (!(p > 0 && p < 1))
    return p <= 0 ? -INFINITY : INFINITY;
  // Below the median refine in p; above it, by symmetry, in the tail.
  if (p <= 0.5)
    return halley(acklam(p), p);
  return -halley(acklam(1 - p), 1 - p);
}

double normal_upper_quantile(double tail)
{
  if (!(tail > 0))
    return INFINITY;
  if (tail >= 1)
    return -INFINITY;
  return -normal_quantile(tail);
}

double expected_max_normal(double n)
{
  // E[M] = integral of x n phi(x) Phi(x)^(n-1) dx, Simpson's rule on [-12, 12] (the integrand is below 1e-30
  // outside for any n up to 1e9).
  constexpr int kSteps = 24000;
  const double lo = -12, hi = 12, h = (hi - lo) / kSteps;
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x   = lo + i * h;
    const double phi = std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double f   = x * n * phi * (cdf > 0 ? std::exp((n - 1) * std::log(cdf)) : 0.0);
    sum += f * (i == 0 || i == kSteps ? 1 : (i % 2 ? 4 : 2));
  }
  return sum * h / 3;
}

double Jitter::quantile(double q, double upper_tail) const
{
  switch (kind) {
  case Kind::none:
    return 1;
  case Kind::lognormal:
    return std::exp(-sigma * sigma / 2 +
                    sigma * (upper_tail < 0.5 ? normal_upper_quantile(upper_tail) : normal_quantile(q)));
  case Kind::empirical: {
    // The empirical quantile, linear between order statistics.
    const double pos = q * static_cast<double>(samples.size() - 1);
    const auto i     = static_cast<std::size_t>(std::floor(pos));
    if (i + 1 >= samples.size())
      return samples.back();
    return samples[i] + (pos - static_cast<double>(i)) * (samples[i + 1] - samples[i]);
  }
  }
  return 1;
}

double Jitter::max_of(double n, double u) const
{
  if (kind == Kind::none)
    return 1;
  // u^(1/n) = exp(log(u) / n); its distance from 1 is -expm1(log(u) / n).
  const double tail = -std::expm1(std::log(u) / n);
  return quantile(1 - tail, tail);
}

} // namespace spansim::reliability
