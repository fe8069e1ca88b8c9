/*-------------------------------------------------------------------------
 *
 * hooks.h
 *		The hooks pklimit installs at preload (hooks.c), and what they need
 *		of pg_cron (cron.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_HOOKS_H
#define PKLIMIT_HOOKS_H

/* hooks.c */
extern void pklimit_install_hooks(void);

/* cron.c */
extern void pklimit_cron_unschedule(void);

#endif							/* PKLIMIT_HOOKS_H */
