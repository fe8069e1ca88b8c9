/*-------------------------------------------------------------------------
 *
 * guards.h
 *		The guards of pklimit's table and names (guards.c), run by the hooks
 *		(hooks.c), and the schema pklimit is installed in.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_GUARDS_H
#define PKLIMIT_GUARDS_H

#include "nodes/nodes.h"

extern bool pklimit_grants_on_tables(Node *parsetree);
extern void pklimit_guard_grant(void);
extern void pklimit_guard_table(Node *parsetree);
extern void pklimit_guard_name(Oid classId, Oid objectId);
extern Oid	pklimit_extension_namespace(void);

#endif							/* PKLIMIT_GUARDS_H */
