#pragma once
#include <postgresql/libpq-fe.h>
