/* base/text.h: small text helpers several modules need. */
#ifndef QUORUM_BASE_TEXT_H
#define QUORUM_BASE_TEXT_H

#include <stddef.h>

/* hex_digit is the value of hex digit |c| (either case), or -1. */
int hex_digit(int c);

/* set_errf writes a printf-style message to |err| (cap |errlen|) for a
 * caller that asked for one (|err| may be NULL). */
void set_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
