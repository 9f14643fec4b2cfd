/* The network a closed sandbox sees and what it can reach: routes, devices, netlink's view,
 * the host's loopback and addresses, public addresses, and vsock. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"

/* ---- what it sees --------------------------------------------------------------------------- */

static int g_lo_seen;

static void check_device_name(const char *source, const char *name) {
  if (strcmp(name, "lo") == 0) {
    g_lo_seen = 1;
    return;
  }
  say("bad", source, "a device besides lo: %s", name);
}

static void proc_route(void) {
  char text[65536];
  if (read_small_file("/proc/net/route", text, sizeof text) < 0) {
    say("info", "proc-net-route", "unreadable: %s", errno_name(errno));
    return;
  }
  int routes = 0;
  int bad = 0;
  char *line = strchr(text, '\n'); /* the header */
  while (line && *++line) {
    char device[64] = "";
    char destination[16] = "";
    if (sscanf(line, "%63s %15s", device, destination) == 2) {
      ++routes;
      if (strcmp(device, "lo") != 0) {
        ++bad;
        say("bad", "proc-net-route", "a route through %s (destination %s)", device, destination);
      }
    }
    line = strchr(line, '\n');
  }
  if (!bad) say("ok", "proc-net-route", "%d IPv4 routes, none besides lo", routes);
}

static void proc_ipv6_route(void) {
  char text[131072];
  if (read_small_file("/proc/net/ipv6_route", text, sizeof text) < 0) {
    say("info", "proc-net-ipv6_route", "unreadable: %s", errno_name(errno));
    return;
  }
  int routes = 0;
  int bad = 0;
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next = '\0';
    char *device = strrchr(line, ' ');
    if (device && *(device + 1)) {
      ++device;
      ++routes;
      if (strcmp(device, "lo") != 0) {
        ++bad;
        say("bad", "proc-net-ipv6_route", "an IPv6 route through %s: %.120s", device, line);
      }
    }
    line = next ? next + 1 : NULL;
  }
  if (!bad) say("ok", "proc-net-ipv6_route", "%d IPv6 routes, none besides lo", routes);
}

static void proc_dev(void) {
  char text[65536];
  if (read_small_file("/proc/net/dev", text, sizeof text) < 0) {
    say("info", "proc-net-dev", "unreadable: %s", errno_name(errno));
    return;
  }
  int devices = 0;
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next = '\0';
    char *colon = strchr(line, ':');
    if (colon && !strchr(line, '|')) {
      *colon = '\0';
      char *name = line;
      while (*name == ' ') ++name;
      ++devices;
      check_device_name("proc-net-dev", name);
    }
    line = next ? next + 1 : NULL;
  }
  say("info", "proc-net-dev", "%d devices", devices);
}

/* One netlink dump; calls `each` for every message of `type`. */
static int netlink_dump(int request, int type, void (*each)(struct nlmsghdr *)) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return -errno;
  struct {
    struct nlmsghdr header;
    struct rtgenmsg body;
  } message;
  memset(&message, 0, sizeof message);
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = (unsigned short)request;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.header.nlmsg_seq = 1;
  message.body.rtgen_family = AF_UNSPEC;
  if (send(fd, &message, sizeof message, 0) < 0) {
    const int saved = errno;
    close(fd);
    return -saved;
  }
  static char buffer[65536];
  for (;;) {
    struct pollfd ready = {fd, POLLIN, 0};
    if (poll(&ready, 1, 3000) <= 0) break;
    ssize_t received = recv(fd, buffer, sizeof buffer, 0);
    if (received <= 0) break;
    int got = (int)received;
    for (struct nlmsghdr *header = (struct nlmsghdr *)buffer; NLMSG_OK(header, got);
         header = NLMSG_NEXT(header, got)) {
      if (header->nlmsg_type == NLMSG_DONE || header->nlmsg_type == NLMSG_ERROR) {
        close(fd);
        return 0;
      }
      if (header->nlmsg_type == type) each(header);
    }
  }
  close(fd);
  return 0;
}

static int g_lo_index = -1;

static void each_link(struct nlmsghdr *header) {
  struct ifinfomsg *info = NLMSG_DATA(header);
  int length = (int)(header->nlmsg_len - NLMSG_LENGTH(sizeof *info));
  for (struct rtattr *attribute = IFLA_RTA(info); RTA_OK(attribute, length);
       attribute = RTA_NEXT(attribute, length)) {
    if (attribute->rta_type == IFLA_IFNAME) {
      const char *name = RTA_DATA(attribute);
      if (strcmp(name, "lo") == 0) g_lo_index = info->ifi_index;
      check_device_name("netlink-link", name);
    }
  }
}

static void each_address(struct nlmsghdr *header) {
  struct ifaddrmsg *info = NLMSG_DATA(header);
  int length = (int)(header->nlmsg_len - NLMSG_LENGTH(sizeof *info));
  for (struct rtattr *attribute = IFA_RTA(info); RTA_OK(attribute, length);
       attribute = RTA_NEXT(attribute, length)) {
    if (attribute->rta_type != IFA_ADDRESS && attribute->rta_type != IFA_LOCAL) continue;
    char text[INET6_ADDRSTRLEN] = "";
    inet_ntop(info->ifa_family, RTA_DATA(attribute), text, sizeof text);
    if (strcmp(text, "127.0.0.1") != 0 && strcmp(text, "::1") != 0) {
      say("bad", "netlink-address", "an address besides loopback: %s", text);
    }
  }
}

static void each_route(struct nlmsghdr *header) {
  struct rtmsg *info = NLMSG_DATA(header);
  int length = (int)(header->nlmsg_len - NLMSG_LENGTH(sizeof *info));
  for (struct rtattr *attribute = RTM_RTA(info); RTA_OK(attribute, length);
       attribute = RTA_NEXT(attribute, length)) {
    if (attribute->rta_type != RTA_OIF) continue;
    const int index = *(int *)RTA_DATA(attribute);
    if (g_lo_index >= 0 && index != g_lo_index) {
      say("bad", "netlink-route", "a route through interface %d, not lo (%d)", index, g_lo_index);
    }
  }
}

int probe_net_view(void) {
  proc_route();
  proc_ipv6_route();
  proc_dev();
  const int links = netlink_dump(RTM_GETLINK, RTM_NEWLINK, each_link);
  if (links < 0) {
    say("ok", "netlink", "NETLINK_ROUTE refused: %s", errno_name(-links));
  } else {
    netlink_dump(RTM_GETADDR, RTM_NEWADDR, each_address);
    netlink_dump(RTM_GETROUTE, RTM_NEWROUTE, each_route);
    say("info", "netlink", "dumped links, addresses and routes");
  }
  if (!g_lo_seen) {
    say("error", "positive-control", "no listing showed even lo: the view proves nothing");
  } else {
    say("ok", "positive-control", "lo is listed");
  }
  return 0;
}

/* ---- what it reaches ------------------------------------------------------------------------ */

/* Connects with a deadline; 1 connected, 0 refused (errno in *error). */
static int connect_with_deadline(int fd, const struct sockaddr *address, socklen_t size,
                                 int timeout_ms, int *error) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (connect(fd, address, size) == 0) return 1;
  if (errno != EINPROGRESS) {
    *error = errno;
    return 0;
  }
  struct pollfd ready = {fd, POLLOUT, 0};
  if (poll(&ready, 1, timeout_ms) <= 0) {
    *error = ETIMEDOUT;
    return 0;
  }
  int status = 0;
  socklen_t length = sizeof status;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length);
  *error = status;
  return status == 0;
}

/* "1.2.3.4:80" or "[::1]:80" */
static int parse_endpoint(const char *text, struct sockaddr_storage *address, socklen_t *size) {
  char host[128];
  int port = 0;
  memset(address, 0, sizeof *address);
  if (text[0] == '[') {
    if (sscanf(text, "[%127[^]]]:%d", host, &port) != 2) return -1;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)address;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((unsigned short)port);
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) != 1) return -1;
    *size = sizeof *v6;
    return 0;
  }
  if (sscanf(text, "%127[^:]:%d", host, &port) != 2) return -1;
  struct sockaddr_in *v4 = (struct sockaddr_in *)address;
  v4->sin_family = AF_INET;
  v4->sin_port = htons((unsigned short)port);
  if (inet_pton(AF_INET, host, &v4->sin_addr) != 1) return -1;
  *size = sizeof *v4;
  return 0;
}

static void reach(const char *check, const char *list, int type, int timeout_ms) {
  char buffer[8192];
  snprintf(buffer, sizeof buffer, "%s", list ? list : "");
  char *items[64];
  const int count = split_list(buffer, items, 64);
  for (int i = 0; i < count; ++i) {
    struct sockaddr_storage address;
    socklen_t size = 0;
    if (parse_endpoint(items[i], &address, &size) != 0) {
      say("error", check, "cannot parse %s", items[i]);
      continue;
    }
    const int fd = socket(address.ss_family, type | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      say("ok", check, "%s: no socket (%s)", items[i], errno_name(errno));
      continue;
    }
    int error = 0;
    if (type == SOCK_DGRAM) {
      if (connect(fd, (struct sockaddr *)&address, size) != 0) {
        say("ok", check, "%s: %s", items[i], errno_name(errno));
      } else if (send(fd, "airlock-probe", 13, 0) < 0) {
        say("ok", check, "%s: send %s", items[i], errno_name(errno));
      } else {
        say("bad", check, "%s: a UDP datagram was sent: this sandbox has a route out", items[i]);
      }
    } else if (connect_with_deadline(fd, (struct sockaddr *)&address, size, timeout_ms, &error)) {
      say("bad", check, "%s: connected", items[i]);
    } else {
      say("ok", check, "%s: %s", items[i], errno_name(error));
    }
    close(fd);
  }
}

static void reach_vsock(const char *list) {
  char buffer[1024];
  snprintf(buffer, sizeof buffer, "%s", list ? list : "");
  char *items[16];
  const int count = split_list(buffer, items, 16);
  const int probe = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) {
    say("ok", "vsock", "no AF_VSOCK socket: %s", errno_name(errno));
    return;
  }
  close(probe);
  for (int i = 0; i < count; ++i) {
    unsigned cid = 0;
    unsigned port = 0;
    if (sscanf(items[i], "%u:%u", &cid, &port) != 2) continue;
    const int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      say("ok", "vsock", "cid %u: no socket (%s)", cid, errno_name(errno));
      continue;
    }
    struct sockaddr_vm address;
    memset(&address, 0, sizeof address);
    address.svm_family = AF_VSOCK;
    address.svm_cid = cid;
    address.svm_port = port;
    int error = 0;
    if (connect_with_deadline(fd, (struct sockaddr *)&address, sizeof address, 2000, &error)) {
      say("bad", "vsock", "connected to cid %u port %u", cid, port);
    } else {
      say("ok", "vsock", "cid %u port %u: %s", cid, port, errno_name(error));
    }
    close(fd);
  }
  if (count == 0) say("info", "vsock", "an AF_VSOCK socket can be created; no endpoint was named");
}

int probe_net_reach(void) {
  const int timeout = (int)arg_number("timeout-ms", 2000);
  reach("host-tcp", arg("tcp"), SOCK_STREAM, timeout);
  reach("public-tcp", arg("public-tcp"), SOCK_STREAM, timeout);
  reach("public-udp", arg("public-udp"), SOCK_DGRAM, timeout);
  reach_vsock(arg("vsock"));
  return 0;
}
