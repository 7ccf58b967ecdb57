// Connection tracking and the receive-deadline watchdog (see conn.h).
#include "server/conn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "base/base.h"

typedef struct srv_conn {
    struct srv_conns *owner;
    struct srv_conn *prev, *next;
    int fd;
    double t0;      // start of the request being received
    atomic_int receiving; // 1 until the request is complete (then the deadline does not apply)
    int cut;
} srv_conn;

struct srv_conns {
    pthread_mutex_t mu; // guards the list; held across shutdown() so libmicrohttpd cannot close the fd meanwhile
    pthread_cond_t cv;
    srv_conn *head;
    double recv_timeout;
    int stopping;
    long cut_total;
    pthread_t th;
};

static void *watchdog(void *arg) {
    srv_conns *t = arg;
    // Checked 10 times per deadline (at most every 0.1 s): a connection is cut within 10 % of its deadline.
    double period = t->recv_timeout / 10 < 0.1 ? t->recv_timeout / 10 : 0.1;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(period * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        const double now = fd_time_s();
        for (srv_conn *c = t->head; c; c = c->next)
            if (!c->cut && atomic_load(&c->receiving) && now - c->t0 > t->recv_timeout) {
                // libmicrohttpd then reads end-of-file (or an error) and closes the connection itself
                shutdown(c->fd, SHUT_RDWR);
                c->cut = 1;
                t->cut_total++;
            }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

srv_conns *srv_conns_create(double recv_timeout) {
    srv_conns *t = fd_calloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->recv_timeout = recv_timeout;
    FD_CHECK(pthread_create(&t->th, NULL, watchdog, t) == 0);
    return t;
}

void srv_conns_free(srv_conns *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
    while (t->head) { // none after MHD_stop_daemon; freed anyway
        srv_conn *c = t->head;
        t->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void srv_conns_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                      enum MHD_ConnectionNotificationCode code) {
    srv_conns *t = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        srv_conn *c = fd_calloc(1, sizeof *c);
        c->owner = t;
        c->fd = ci ? ci->connect_fd : -1;
        c->t0 = fd_time_s();
        atomic_init(&c->receiving, c->fd >= 0);
        pthread_mutex_lock(&t->mu);
        c->next = t->head;
        if (t->head) t->head->prev = c;
        t->head = c;
        pthread_mutex_unlock(&t->mu);
        *socket_context = c;
    } else if (*socket_context) { // closed: libmicrohttpd closes the socket after this returns
        srv_conn *c = *socket_context;
        pthread_mutex_lock(&t->mu);
        if (c->prev) c->prev->next = c->next;
        else t->head = c->next;
        if (c->next) c->next->prev = c->prev;
        pthread_mutex_unlock(&t->mu);
        free(c);
        *socket_context = NULL;
    }
}

static srv_conn *conn_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv_conns_request_received(struct MHD_Connection *mc) {
    srv_conn *c = conn_of(mc);
    if (c) atomic_store(&c->receiving, 0);
}

void srv_conns_request_done(struct MHD_Connection *mc) {
    srv_conn *c = conn_of(mc);
    if (!c) return;
    pthread_mutex_lock(&c->owner->mu);
    c->t0 = fd_time_s();
    pthread_mutex_unlock(&c->owner->mu);
    atomic_store(&c->receiving, 1);
}

int srv_conns_was_cut(struct MHD_Connection *mc) {
    srv_conn *c = conn_of(mc);
    if (!c) return 0;
    pthread_mutex_lock(&c->owner->mu);
    const int cut = c->cut;
    pthread_mutex_unlock(&c->owner->mu);
    return cut;
}

long srv_conns_cut_total(srv_conns *t) {
    pthread_mutex_lock(&t->mu);
    long n = t->cut_total;
    pthread_mutex_unlock(&t->mu);
    return n;
}
