/*
 * Variadic libc entry points of the mlx5dv-sim interposer.
 *
 * Stable Rust cannot define a C-variadic function, so these tiny shims read
 * the variadic argument the way glibc itself does and forward to fixed-arity
 * Rust functions (src/interpose/). Why this is correct:
 *  - open/openat: the mode argument exists only when O_CREAT or O_TMPFILE is
 *    in the flags (POSIX; glibc's __OPEN_NEEDS_MODE); it is read only then,
 *    else 0 is forwarded. The Rust side passes it on to the real function,
 *    which ignores it in the same cases.
 *  - ioctl: the kernel takes one unsigned-long-sized argument; glibc reads
 *    it as a pointer with va_arg(ap, void *). Callers that pass no third
 *    argument get an indeterminate word forwarded, exactly as with glibc.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>

int mlx5dv_sim_open(const char *path, int flags, unsigned int mode);
int mlx5dv_sim_openat(int dirfd, const char *path, int flags, unsigned int mode);
int mlx5dv_sim_ioctl(int fd, unsigned long request, void *arg);

#ifdef O_TMPFILE
#define NEEDS_MODE(f) (((f) & O_CREAT) != 0 || ((f) & O_TMPFILE) == O_TMPFILE)
#else
#define NEEDS_MODE(f) (((f) & O_CREAT) != 0)
#endif

#define READ_MODE(flags, last, mode)                                           \
	do {                                                                   \
		if (NEEDS_MODE(flags)) {                                       \
			va_list ap;                                            \
			va_start(ap, last);                                    \
			mode = va_arg(ap, unsigned int);                       \
			va_end(ap);                                            \
		}                                                              \
	} while (0)

int open(const char *path, int flags, ...)
{
	unsigned int mode = 0;
	READ_MODE(flags, flags, mode);
	return mlx5dv_sim_open(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	unsigned int mode = 0;
	READ_MODE(flags, flags, mode);
	return mlx5dv_sim_open(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	unsigned int mode = 0;
	READ_MODE(flags, flags, mode);
	return mlx5dv_sim_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	unsigned int mode = 0;
	READ_MODE(flags, flags, mode);
	return mlx5dv_sim_openat(dirfd, path, flags, mode);
}

/* _FORTIFY_SOURCE variants: no mode argument by contract. */
int __open_2(const char *path, int flags)
{
	return mlx5dv_sim_open(path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
	return mlx5dv_sim_open(path, flags, 0);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	return mlx5dv_sim_openat(dirfd, path, flags, 0);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	return mlx5dv_sim_openat(dirfd, path, flags, 0);
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	return mlx5dv_sim_ioctl(fd, request, arg);
}

/* Referenced from Rust so that the linker keeps this object file. */
void mlx5dv_sim_variadic_anchor(void)
{
}
