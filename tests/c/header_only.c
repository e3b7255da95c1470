/* Includes only llb.h: the public header must stand alone under -Wall -Wextra -Werror -pedantic. */
#include "llb.h"

typedef char *(*version_fn)(void);
typedef char *(*info_fn)(const char *);
typedef void (*free_fn)(char *);

/* Taking every function's address checks the declarations, not just the preprocessing. */
version_fn llb_test_version_ptr = llb_version;
info_fn llb_test_info_ptr = llb_model_info;
free_fn llb_test_free_ptr = llb_string_free;

typedef llb_chat *(*create_fn)(const char *, llb_event_fn, void *);
typedef char *(*infer_fn)(llb_chat *, const char *);
typedef void (*destroy_fn)(llb_chat *);
create_fn llb_test_create_ptr = llb_chat_create;
infer_fn llb_test_infer_ptr = llb_chat_infer;
destroy_fn llb_test_destroy_ptr = llb_chat_destroy;
