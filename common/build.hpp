#pragma once
/// @file
/// @brief What the compiler built this binary with, where behaviour must differ (sanitizers).

namespace spansim {

#if defined(__SANITIZE_ADDRESS__)
#define SPANSIM_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPANSIM_ADDRESS_SANITIZER 1
#endif
#endif

/// @brief Whether this binary runs under AddressSanitizer (GCC's __SANITIZE_ADDRESS__ or clang's feature test).
#ifdef SPANSIM_ADDRESS_SANITIZER
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

} // namespace spansim
